"""Fakes for pure-logic tests (never for storage, the log or the network)."""

from __future__ import annotations

import asyncio
import struct
import zlib


class FakeSocket:
    """Stands in for a prepared WebSocketResponse and its sink (``hub.Sink``): records what is
    written; can be made to block like a full socket or to raise ``fail`` on every write.
    ``encoding``: the frames it takes (0 plain, else the deflate window bits)."""

    def __init__(self, stuck: bool = False, fail: Exception | None = None, encoding: int = 0) -> None:
        self.encoding = encoding
        self.frames: list[bytes] = []  # each write, as given
        self.fail = fail
        self.stuck = asyncio.Event() if stuck else None
        self.close_code: int | None = None
        self.close_reason: bytes | None = None
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.fail is not None:
            raise self.fail
        self.frames.append(data)

    async def drain(self) -> None:
        if self.stuck is not None:
            await self.stuck.wait()

    @property
    def messages(self) -> list[bytes]:
        """The payloads of every text frame written, in order (inflated when compressed)."""
        return unframe(b"".join(self.frames))

    async def close(self, *, code: int, message: bytes) -> bool:
        self.close_code, self.close_reason, self.closed = code, message, True
        return True


def unframe(data: bytes) -> list[bytes]:
    """Read unmasked, final server frames back into their payloads (RFC 6455 5.2, RFC 7692 7.2.2)."""
    out = []
    while data:
        first, second = data[0], data[1]
        assert first & 0x80 and first & 0x0F == 1 and not second & 0x80, data[:2]
        n, at = second & 0x7F, 2
        if n == 126:
            (n,), at = struct.unpack("!H", data[2:4]), 4
        elif n == 127:
            (n,), at = struct.unpack("!Q", data[2:10]), 10
        payload, data = data[at : at + n], data[at + n :]
        if first & 0x40:  # compressed, with no context from earlier messages
            payload = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
        out.append(payload)
    return out
