"""The announcing stage of the feed: the translations that committed records first made visible
(:func:`..readmodel.announcements.announced`) broadcast through the hub, each message with the
resume cursor just after it, and the resume position that moves with them (docs/resume.md).

With tracing on, each message is broadcast under a PRODUCER span ``broadcast post.created``,
child of its post's stored trace context (:mod:`..readmodel.post_traces`, read once per batch),
counting the sockets it reached; with tracing off, nothing of it runs but one branch per batch
and one per message."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from ..common.db import BoundedReader, storage_errors
from ..common.runtime.errors import TransientError
from ..common.runtime.retry import retry_transient
from ..common.tracing import OFF, ROOT, Kind, Parent, Tracing
from ..readmodel import cursors
from ..readmodel.announcements import Announcement, announced
from ..readmodel.filters import FilterFacts
from ..readmodel.post_traces import post_trace_contexts
from . import protocol
from .hub import Hub
from .metrics import StreamMetrics
from .pending import Pending

log = logging.getLogger(__name__)

#: The broadcast span's attribute: how many sockets the message was queued to.
SOCKETS = "tickerwire.stream.sockets"


class Broadcaster:
    def __init__(
        self,
        db: BoundedReader,
        hub: Hub,
        metrics: StreamMetrics,
        yield_every: int,
        before_announce: Callable[[list[tuple[int, int]]], Awaitable[None]] | None,
        tracing: Tracing = OFF,
    ) -> None:
        self.db, self.hub, self.metrics, self.yield_every = db, hub, metrics, yield_every
        self.tracing = tracing
        #: The resume cursor after the last message published: the epoch of the log, and per
        #: partition the mark at or below which every announcement was published. A connection
        #: registered now gets every announcement above it live.
        self.epoch = ""
        self.marks: dict[int, cursors.Mark] = {}
        #: Awaited with the (partition, offset) of committed records before they are announced
        #: (the stream's wait for its replicas: replicated.py), when set.
        self.before_announce = before_announce

    async def refresh_epoch(self) -> None:
        """The read model's epoch; when it changed (a new log accepted), the marks of the
        partitions whose log was replaced move back to where the new log is read from."""

        async def load():
            with storage_errors("log epoch"):
                return await cursors.current_epoch(self.db)

        now = await retry_transient(load, what="log epoch", cap=2.0)
        if now.epoch != self.epoch and self.epoch:
            log.warning(
                "stream feed: the log epoch changed (%s -> %s); cursors of the old one are refused",
                self.epoch,
                now.epoch,
            )
            for partition, start in now.starts.items():
                self.marks[partition] = min(self.marks.get(partition, cursors.START), (start, ""))
        self.epoch = now.epoch

    async def announce(self, ready: list[Pending]) -> None:
        """Broadcast what these committed records announce, in log order, then move the marks past them."""
        if self.before_announce is not None:
            await self.before_announce([(p.partition, p.offset) for p in ready])

        async def load():
            with storage_errors("announced posts"):
                return await announced(self.db, [(p.post_id, p.partition, p.offset) for p in ready])

        await self.refresh_epoch()
        found = await retry_transient(load, what="announced posts", cap=2.0)
        arrived = {(p.partition, p.offset): p.arrived for p in ready}
        parents = await self._parents(ready, found) if self.tracing.enabled and found else None
        marks = self.marks
        for n, a in enumerate(found, start=1):
            facts = FilterFacts.of(a.lang, a.tickers, a.category_slugs)
            cursors.advance(marks, a.partition, (a.offset, a.lang))
            with_cursor = (
                protocol.post_created(a.lean, a.partition, a.offset, cursors.encode(self.epoch, marks))
                if self.hub.cursor_connections
                else None
            )
            payload, key = protocol.post_created(a.lean, a.partition, a.offset), (a.partition, a.offset, a.lang)
            if parents is None:
                self.hub.publish(payload, facts, with_cursor, key, self.epoch)
                self.metrics.delivery_seconds.observe(time.perf_counter() - arrived[(a.partition, a.offset)])
            else:
                parent, post_id = parents[(a.partition, a.offset)]
                attributes = {"tickerwire.post.id": post_id, "tickerwire.post.lang": a.lang}
                with self.tracing.start("broadcast post.created", Kind.PRODUCER, parent, (), attributes) as span:
                    span.set_attribute(SOCKETS, self.hub.publish(payload, facts, with_cursor, key, self.epoch))
                    latency = time.perf_counter() - arrived[(a.partition, a.offset)]
                    self.metrics.delivery_seconds.observe(latency, self.tracing.exemplar())
            if n % self.yield_every == 0:
                # Let every writer hand the queued messages to its socket: a burst never
                # fills the queue of a client that is reading.
                await asyncio.sleep(0)
        for p in ready:  # every record of the batch is announced now, those announcing nothing included
            cursors.advance(marks, p.partition, (p.offset + 1, ""))
        await asyncio.sleep(0)

    async def _parents(
        self, ready: list[Pending], found: list[Announcement]
    ) -> dict[tuple[int, int], tuple[Parent, int]]:
        """Per announcing record (partition, offset): the stored trace context of its post (one
        read for the batch; a new trace when the post has none, or the read fails: tracing is
        never in the way of a broadcast) and the post's id."""
        post_ids = {(p.partition, p.offset): p.post_id for p in ready}
        wanted = {post_ids[(a.partition, a.offset)] for a in found}
        try:
            with storage_errors("post trace contexts"):
                stored = await post_trace_contexts(self.db, wanted)
        except TransientError as exc:
            log.warning("stream: broadcasting without the posts' trace contexts (%s)", exc)
            stored = {}
        parents = {}
        for position, post_id in post_ids.items():
            context = stored.get(post_id)
            parent = self.tracing.extract(context.headers()) if context is not None else None
            parents[position] = (parent or ROOT, post_id)
        return parents
