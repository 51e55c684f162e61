"""Fakes for pure-logic tests (never for storage, the log or the network)."""

from __future__ import annotations

import asyncio
import struct
import zlib


class FakeSocket:
    """Stands in for a prepared WebSocketResponse and its sink (``hub.Sink``): records what is
    written; can be made to block like a full socket or to raise ``fail`` on every write.
    ``encoding``: the frames it takes (0 plain, else the deflate window bits); ``takeover``: its
    deflate keeps context (its frames are inflated after the ones before)."""

    def __init__(
        self, stuck: bool = False, fail: Exception | None = None, encoding: int = 0, takeover: bool = False
    ) -> None:
        self.encoding = encoding
        self.takeover = takeover
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
        """The payloads of every text frame written, in order (inflated when compressed, within
        its window and, with context takeover, by one inflater as its client would)."""
        return unframe(b"".join(self.frames), self.encoding or 15, self.takeover)

    async def close(self, *, code: int, message: bytes) -> bool:
        self.close_code, self.close_reason, self.closed = code, message, True
        return True


def unframe(data: bytes, window_bits: int = 15, takeover: bool = False) -> list[bytes]:
    """Read unmasked, final server frames back into their payloads (RFC 6455 5.2, RFC 7692 7.2.2):
    each compressed one alone, or, with ``takeover``, all by one inflater (each after the ones
    before), as a client with that deflate window reads them."""
    out = []
    stream = zlib.decompressobj(-window_bits)
    while data:
        first, second = data[0], data[1]
        assert first & 0x80 and first & 0x0F == 1 and not second & 0x80, data[:2]
        n, at = second & 0x7F, 2
        if n == 126:
            (n,), at = struct.unpack("!H", data[2:4]), 4
        elif n == 127:
            (n,), at = struct.unpack("!Q", data[2:10]), 10
        payload, data = data[at : at + n], data[at + n :]
        if first & 0x40:  # compressed: with no context from earlier messages, unless takeover
            payload = inflate(stream if takeover else zlib.decompressobj(-window_bits), payload)
        out.append(payload)
    return out


def inflate(decoder, data: bytes) -> bytes:
    """One message's payload through ``decoder``, 64 bytes of output at a time, so that every back
    reference is read from the decoder's window (zlib reports one reaching further back)."""
    out, rest = b"", data + b"\x00\x00\xff\xff"
    while True:
        chunk = decoder.decompress(rest, 64)
        out, rest = out + chunk, decoder.unconsumed_tail
        if not chunk and not rest:
            return out
