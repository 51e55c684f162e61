"""Fan-out: every connection has a bounded queue and one writer task.

A message is encoded once and the same :class:`~.frames.Message` is queued to every
connection; its frame is built once per encoding (plain, or deflated with one window size)
and history (the previous message of a connection with context takeover), and those same
bytes are written to every connection that shares them (``frames.py``). The
per-message, per-connection work is one ``put_nowait``; a writer that wakes up to several
queued messages writes their frames in one transport write. Connections
are grouped by their opt-in filter (``services/readmodel/filters.py``): a post.created is matched once per
distinct filter set, then queued to every connection of the groups that admit it. A client
whose queue is full has stopped reading: it is closed with ``CLOSE_SLOW_CONSUMER`` and
never slows the others (nothing here ever awaits a client's socket except its own writer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass, field
from typing import Callable, Protocol

from aiohttp import web

from ..readmodel.cursors import START, Mark, after
from ..readmodel.filters import EVERYTHING, AnnouncementFilter, FilterFacts
from . import protocol
from .frames import Message
from .metrics import StreamMetrics
from .wire import Wire

log = logging.getLogger(__name__)

#: How long a closing handshake may take before the socket is aborted (a stuck client).
CLOSE_GRACE_S = 10.0
#: Kernel send buffer per connection (Linux doubles it). Autotuning would let a stuck client
#: hold up to 4 MiB of kernel memory and go unnoticed that long; 256 KiB still covers the
#: bandwidth-delay product of ordinary partner links for this message rate.
SEND_BUFFER_BYTES = 256 * 1024
#: Live messages held for one connection while its resume replays; beyond, it is closed as a
#: slow consumer (and resumes again from the last cursor it processed).
MAX_HELD = 100_000


class Sink(Protocol):
    """Where a connection's frames go (``wire.Wire`` for a real WebSocket)."""

    #: Which frame of a message it takes (frames.py): 0 plain, else the deflate window bits.
    encoding: int
    #: Deflate with context takeover: its client inflates each message after the ones before.
    takeover: bool

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


@dataclass(eq=False)
class Connection:
    ws: web.WebSocketResponse
    transport: asyncio.Transport | None
    sink: Sink
    workspace_id: str
    key_hash: str
    session_id: str
    queue: asyncio.Queue[Message]
    filter: AnnouncementFilter = EVERYTHING
    closing: bool = False
    writer: asyncio.Task | None = field(default=None, repr=False)
    #: Opted in to resume cursors: gets the post.created that carries one.
    cursors: bool = False
    #: While a resume replays: the live messages, in order, queued after the replay (None: live).
    held: list[Message] | None = None
    #: Announcements at or below these marks were replayed: never sent again live.
    skip: dict[int, Mark] | None = None
    #: Per partition, the log epoch and the last announcement written to this connection: nothing
    #: at or below it in that epoch is ever written again (the per-partition order cursors promise).
    sent: dict[int, tuple[str, Mark]] = field(default_factory=dict)

    def replayed(self, key: tuple[int, int, str]) -> bool:
        """Whether announcement ``key`` (partition, offset, lang) was part of this connection's replay."""
        return self.skip is not None and not after(self.skip.get(key[0], START), key[1], key[2])


class Hub:
    def __init__(
        self, metrics: StreamMetrics, queue_size: int = 256, sink_of: Callable[[web.WebSocketResponse], Sink] = Wire
    ) -> None:
        self.metrics = metrics
        self.queue_size = queue_size
        self.sink_of = sink_of
        self.connections: dict[str, Connection] = {}
        #: How many open connections opted in to cursors (the feed encodes cursors only for them).
        self.cursor_connections = 0
        #: Open connections by filter set, so matching costs one test per set and message.
        self.groups: dict[AnnouncementFilter, dict[str, Connection]] = {}
        self._closers: set[asyncio.Task] = set()
        # Keyed by bytes 9..13 of the encoded message: b'{"type":"' is followed by the type.
        self._sent = {
            kind.encode()[:4]: metrics.messages_sent.labels(kind) for kind in ("ready", "ping", "post.created")
        }
        self._built = {encoding: metrics.frames_built.labels(encoding_label(encoding)) for encoding in range(16)}

    def message(
        self, payload: bytes, shared: bool = False, key: tuple[int, int, str] | None = None, epoch: str = ""
    ) -> Message:
        """``payload`` (one encoded message) ready to be queued to any number of connections
        (``shared``: to many, a broadcast; else it is one connection's own); ``key``: the
        announcement of a ``post.created``, in the log of ``epoch``."""
        return Message(payload, self._sent.get(payload[9:13]), shared, key, epoch)

    def open(
        self,
        ws: web.WebSocketResponse,
        transport,
        workspace_id: str,
        key_hash: str,
        session_id: str,
        stream_filter: AnnouncementFilter = EVERYTHING,
        *,
        cursors: bool = False,
        replaying: bool = False,
    ) -> Connection:
        """Register a connection: from now on it gets every message published (held, with
        ``replaying``, until :meth:`go_live`)."""
        conn = Connection(
            ws,
            transport,
            self.sink_of(ws),
            workspace_id,
            key_hash,
            session_id,
            asyncio.Queue(self.queue_size),
            stream_filter,
            cursors=cursors,
            held=[] if replaying else None,
        )
        self.cursor_connections += cursors
        conn.writer = asyncio.create_task(self._write(conn), name=f"ws-writer-{session_id}")
        self.connections[session_id] = conn
        self.groups.setdefault(stream_filter, {})[session_id] = conn
        self._gauges()
        return conn

    async def forget(self, conn: Connection) -> None:
        if self.connections.pop(conn.session_id, None) is not None:
            self.cursor_connections -= conn.cursors
        group = self.groups.get(conn.filter)
        if group is not None:
            group.pop(conn.session_id, None)
            if not group:
                del self.groups[conn.filter]
        self._gauges()
        await _cancel(conn.writer)

    def _gauges(self) -> None:
        self.metrics.connections.set(len(self.connections))
        self.metrics.filter_groups.set(len(self.groups))

    @staticmethod
    def _offer(conn: Connection, message: Message) -> bool:
        """Queue ``message`` for ``conn``; False when its queue is full (it stopped reading)."""
        if conn.closing:
            return True
        if conn.held is not None:
            if len(conn.held) >= MAX_HELD:
                return False
            conn.held.append(message)
            return True
        try:
            conn.queue.put_nowait(message)
        except asyncio.QueueFull:
            return False
        return True

    def send(self, conn: Connection, payload: bytes) -> None:
        """Queue a message of this connection's own (its ``ready``)."""
        if not self._offer(conn, self.message(payload)):
            self._slow(conn)

    async def put(
        self, conn: Connection, payload: bytes, key: tuple[int, int, str] | None = None, epoch: str = ""
    ) -> None:
        """Queue a message of this connection's own, waiting for room (a resume's replay);
        ``key``: the announcement of a ``post.created``, in the log of ``epoch``."""
        await conn.queue.put(self.message(payload, key=key, epoch=epoch))

    def broadcast(self, payload: bytes) -> int:
        """Queue ``payload`` to every open connection; returns how many got it."""
        message = self.message(payload, shared=True)
        slow = [conn for conn in self.connections.values() if not self._offer(conn, message)]
        for conn in slow:  # closed after the loop: closing changes the set being walked
            self._slow(conn)
        return len(self.connections) - len(slow)

    def publish(
        self,
        payload: bytes,
        post: FilterFacts,
        with_cursor: bytes | None = None,
        key: tuple[int, int, str] | None = None,
        epoch: str = "",
    ) -> int:
        """Queue a post.created to every connection whose filter admits ``post``; returns how many got it.

        Connections that opted in to cursors get ``with_cursor`` (the same message with its
        cursor: one message for all of them), except one that already had announcement ``key``
        (partition, offset, lang) replayed. ``epoch``: the log's."""
        message = self.message(payload, shared=True, key=key, epoch=epoch)
        cursored = None if with_cursor is None else self.message(with_cursor, shared=True, key=key, epoch=epoch)
        slow: list[Connection] = []
        offered = 0
        for stream_filter, group in self.groups.items():
            if not stream_filter.admits(post):
                continue
            offered += len(group)
            if cursored is None:
                slow.extend(conn for conn in group.values() if not self._offer(conn, message))
                continue
            for conn in group.values():
                if not conn.cursors:
                    ok = self._offer(conn, message)
                elif key is not None and conn.replayed(key):
                    offered -= 1
                    continue
                else:
                    ok = self._offer(conn, cursored)
                if not ok:
                    slow.append(conn)
        for conn in slow:  # closed after the loop: closing changes the set being walked
            self._slow(conn)
        return offered - len(slow)

    @staticmethod
    def skip_live(conn: Connection, replayed: dict[int, Mark] | None) -> None:
        """While ``conn``'s resume replays: announcements at or below ``replayed`` (per partition)
        are part of the replay, so :meth:`publish` never sends them to it live (None: none is)."""
        conn.skip = replayed

    async def go_live(self, conn: Connection) -> None:
        """After a resume's replay was queued: queue the live messages held meanwhile (waiting for
        room, as the replay did), then send live messages straight to the queue. Those its
        resume cursor already covered are dropped: they were held before the replay had read
        the cursor (:meth:`skip_live`), as when this process's feed is behind the one that
        issued the cursor and announces what the client has while the replay starts."""
        while conn.held:
            held, conn.held = conn.held, []
            for message in held:
                if message.key is None or not conn.replayed(message.key):
                    await conn.queue.put(message)
        conn.held = None  # no await since the last check: nothing published meanwhile is lost

    def _slow(self, conn: Connection) -> None:
        self.metrics.slow_closed.inc()
        log.info(
            "closing slow client", extra={"fields": {"session_id": conn.session_id, "workspace_id": conn.workspace_id}}
        )
        self.close(conn, protocol.CLOSE_SLOW_CONSUMER, protocol.SLOW_CONSUMER_REASON)

    def close(self, conn: Connection, code: int, reason: str) -> None:
        """Start closing ``conn``; never waits on the client's socket."""
        if conn.closing:
            return
        conn.closing = True
        self.metrics.closed.labels(str(code)).inc()
        task = asyncio.create_task(self._close(conn, code, reason), name=f"ws-close-{conn.session_id}")
        self._closers.add(task)
        task.add_done_callback(self._closed)

    def _closed(self, task: asyncio.Task) -> None:
        self._closers.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:  # a defect: never silent
            log.error("closing a stream connection failed", exc_info=exc)

    def close_sessions(self, session_ids, code: int, reason: str) -> None:
        for session_id in session_ids:
            if (conn := self.connections.get(session_id)) is not None:
                self.close(conn, code, reason)

    async def _close(self, conn: Connection, code: int, reason: str) -> None:
        """Stop the writer (it may be stuck on a full socket), send the close frame after
        whatever is already buffered, and give the client ``CLOSE_GRACE_S`` to take it; a
        client that has not taken it by then (it stopped reading) has its socket aborted, so
        its connection, and its workspace's slot, are freed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_GRACE_S
        await _cancel(conn.writer)
        # Its own task, awaited through asyncio.wait: the writer's cancellation also cancels
        # aiohttp's shared drain waiter, so ws.close() can end at once with a CancelledError
        # that is not this task's (wait_for would re-raise it here and skip the abort).
        closing = asyncio.ensure_future(conn.ws.close(code=code, message=reason.encode()))
        try:
            await asyncio.wait({closing}, timeout=CLOSE_GRACE_S)
        except asyncio.CancelledError:
            closing.cancel()
            raise
        if not closing.done():
            closing.cancel()
        elif not closing.cancelled():
            closing.exception()  # retrieved: a client gone meanwhile is no error here
        transport = conn.transport
        if transport is None:
            return
        # The frame is out once aiohttp's buffer is empty (the kernel then owns the rest and
        # the transport's own close completes); until the deadline, the client may still read.
        while transport.get_write_buffer_size() > 0 and loop.time() < deadline:
            await asyncio.sleep(0.1)
        if transport.get_write_buffer_size() > 0:
            transport.abort()  # the client did not take the close frame in time

    async def _write(self, conn: Connection) -> None:
        """The connection's writer. A failure that is not the client's going away is a defect:
        it is logged at ERROR and the client is closed with 1011, never left without a writer
        until its queue overflows and it is blamed as a slow consumer."""
        try:
            await self._drain(conn)
        except Exception:  # noqa: BLE001 - the task's last word; CancelledError passes
            log.exception(
                "stream writer failed",
                extra={"fields": {"session_id": conn.session_id, "workspace_id": conn.workspace_id}},
            )
            self.close(conn, protocol.CLOSE_INTERNAL_ERROR, protocol.INTERNAL_ERROR_REASON)

    async def _drain(self, conn: Connection) -> None:
        queue, sink = conn.queue, conn.sink
        encoding, takeover, built = sink.encoding, sink.takeover, self._built[sink.encoding].inc
        # With context takeover: the last message written to this connection (every message
        # is, compressed), so its client's window ends with it; chosen here, in write order.
        last: Message | None = None
        while True:
            batch = [await queue.get()]
            while not queue.empty():  # one wake-up, one write: everything already queued
                batch.append(queue.get_nowait())
            batch = [m for m in batch if m.key is None or self._first(conn, m.epoch, m.key)]
            if not batch:
                continue
            frames = []
            for message in batch:
                if takeover:
                    frame = message.frame_after(encoding, last, built)
                    last = message
                else:  # the first connection of this encoding to take it builds it
                    frame = message.frames.get(encoding) or message.frame(encoding, built)
                frames.append(frame)
            try:
                sink.write(frames[0] if len(frames) == 1 else b"".join(frames))
            except ConnectionError:
                conn.closing = True  # the client is gone; its handler forgets it
                return
            _count_sent(batch)
            try:
                await sink.drain()
            except ConnectionError:
                conn.closing = True
                return

    def _first(self, conn: Connection, epoch: str, key: tuple[int, int, str]) -> bool:
        """Whether announcement ``key`` comes after the last one written to ``conn`` on its
        partition (then it is the last one now); otherwise it is dropped, counted and logged:
        a connection never gets one announcement twice, nor one out of order. A new log
        (another ``epoch``: a log accepted after a reset) starts its partitions afresh."""
        partition, offset, lang = key
        last_epoch, last = conn.sent.get(partition, (epoch, START))
        if last_epoch != epoch or after(last, offset, lang):
            conn.sent[partition] = (epoch, (offset, lang))
            return True
        self.metrics.repeats_dropped.inc()
        log.warning(
            "not sending announcement %d:%d %s again: the connection already had %s on that partition",
            partition,
            offset,
            lang,
            last,
            extra={"fields": {"session_id": conn.session_id, "workspace_id": conn.workspace_id}},
        )
        return False

    async def shutdown(self, timeout: float = CLOSE_GRACE_S) -> None:
        """Graceful shutdown: every client gets 1001 and reconnects, possibly elsewhere."""
        for conn in list(self.connections.values()):
            self.close(conn, protocol.CLOSE_GOING_AWAY, protocol.GOING_AWAY_REASON)
        if self._closers:
            await asyncio.wait(list(self._closers), timeout=timeout)


def _count_sent(batch: list[Message]) -> None:
    """One increment of a type's counter per run of messages of that type (not one per message)."""
    tag, count = batch[0].tag, 0
    for message in batch:
        if message.tag is not tag:
            if tag is not None:
                tag.inc(count)
            tag, count = message.tag, 0
        count += 1
    if tag is not None:
        tag.inc(count)


def encoding_label(encoding: int) -> str:
    return f"deflate-{encoding}" if encoding else "plain"


def limit_send_buffer(transport: asyncio.BaseTransport | None) -> None:
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)


async def _cancel(task: asyncio.Task | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
