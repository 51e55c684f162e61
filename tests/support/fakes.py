"""Fakes for pure-logic tests (never for storage, the log or the network)."""

from __future__ import annotations

import asyncio


class FakeSocket:
    """Stands in for a WebSocketResponse: records frames; can be made to block like a full socket
    or to raise ``fail`` on every send."""

    def __init__(self, stuck: bool = False, fail: Exception | None = None) -> None:
        self.frames: list[bytes] = []
        self.fail = fail
        self.stuck = asyncio.Event() if stuck else None
        self.close_code: int | None = None
        self.close_reason: bytes | None = None
        self.closed = False

    async def send_frame(self, message: bytes, opcode) -> None:
        if self.fail is not None:
            raise self.fail
        if self.stuck is not None:
            await self.stuck.wait()
        self.frames.append(message)

    async def close(self, *, code: int, message: bytes) -> bool:
        self.close_code, self.close_reason, self.closed = code, message, True
        return True
