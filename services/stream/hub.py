"""Fan-out: every connection has a bounded queue and one writer task.

A message is encoded once and the same bytes are queued to every connection. A client
whose queue is full has stopped reading: it is closed with :data:`CLOSE_SLOW_CONSUMER`
and never slows the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from .metrics import StreamMetrics

log = logging.getLogger(__name__)

#: Close codes (documented in the AsyncAPI document and the README).
CLOSE_GOING_AWAY = 1001  # the server shuts down: reconnect, possibly elsewhere
CLOSE_SLOW_CONSUMER = 4008  # the client did not read fast enough
CLOSE_ACCESS_REVOKED = 4003  # key revoked, workspace suspended or badge missing since connect


@dataclass(eq=False)
class Connection:
    ws: web.WebSocketResponse
    workspace_id: str
    key_hash: str
    session_id: str
    queue: asyncio.Queue[bytes | None]
    closing: bool = False
    writer: asyncio.Task | None = field(default=None, repr=False)


class Hub:
    def __init__(self, metrics: StreamMetrics, queue_size: int = 256) -> None:
        self.metrics = metrics
        self.queue_size = queue_size
        self.connections: set[Connection] = set()

    def open(self, ws: web.WebSocketResponse, workspace_id: str, key_hash: str, session_id: str) -> Connection:
        conn = Connection(ws, workspace_id, key_hash, session_id, asyncio.Queue(self.queue_size))
        conn.writer = asyncio.create_task(self._write(conn), name=f"ws-writer-{session_id}")
        self.connections.add(conn)
        self.metrics.connections.set(len(self.connections))
        return conn

    async def forget(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.metrics.connections.set(len(self.connections))
        if conn.writer is not None:
            conn.writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await conn.writer

    def send(self, conn: Connection, message: bytes, kind: str) -> None:
        if conn.closing:
            return
        try:
            conn.queue.put_nowait(message)
        except asyncio.QueueFull:
            self.metrics.slow_closed.inc()
            log.info("closing slow client", extra={"fields": {"session_id": conn.session_id}})
            self.close(conn, CLOSE_SLOW_CONSUMER, "slow consumer: messages were not read in time")

    def broadcast(self, message: bytes, kind: str) -> None:
        for conn in list(self.connections):
            self.send(conn, message, kind)

    def close(self, conn: Connection, code: int, reason: str) -> None:
        """Close without waiting on the client's socket (which may be stuck)."""
        if conn.closing:
            return
        conn.closing = True
        self.metrics.closed.labels(str(code)).inc()
        asyncio.create_task(self._close(conn, code, reason))

    async def _close(self, conn: Connection, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.ws.close(code=code, message=reason.encode()), timeout=2.0)
        if not conn.ws.closed:
            with contextlib.suppress(Exception):
                conn.ws._writer.transport.abort()  # type: ignore[union-attr]  # noqa: SLF001

    async def _write(self, conn: Connection) -> None:
        while True:
            message = await conn.queue.get()
            if message is None:
                return
            try:
                await conn.ws.send_frame(message, WSMsgType.TEXT)
            except (ConnectionError, RuntimeError):
                return
            self.metrics.messages_sent.labels(_kind(message)).inc()

    async def shutdown(self) -> None:
        """Graceful shutdown: every client gets 1001 and reconnects elsewhere."""
        for conn in list(self.connections):
            self.close(conn, CLOSE_GOING_AWAY, "server shutting down")
        await asyncio.sleep(0)


def _kind(message: bytes) -> str:
    return message[9:message.index(b'"', 9)].decode() if message.startswith(b'{"type":"') else "other"
