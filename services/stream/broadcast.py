"""The announcing stage of the feed: the translations that committed records first made visible
(:func:`..readmodel.announcements.announced`) broadcast through the hub, each message with the
resume cursor just after it, and the resume position that moves with them (docs/resume.md)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from ..common.db import BoundedReader, storage_errors
from ..common.runtime.retry import retry_transient
from ..readmodel import cursors
from ..readmodel.announcements import announced
from ..readmodel.filters import FilterFacts
from . import protocol
from .hub import Hub
from .metrics import StreamMetrics
from .pending import Pending

log = logging.getLogger(__name__)


class Broadcaster:
    def __init__(
        self,
        db: BoundedReader,
        hub: Hub,
        metrics: StreamMetrics,
        yield_every: int,
        before_announce: Callable[[list[tuple[int, int]]], Awaitable[None]] | None,
    ) -> None:
        self.db, self.hub, self.metrics, self.yield_every = db, hub, metrics, yield_every
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
        marks = self.marks
        for n, a in enumerate(found, start=1):
            facts = FilterFacts.of(a.lang, a.tickers, a.category_slugs)
            cursors.advance(marks, a.partition, (a.offset, a.lang))
            with_cursor = (
                protocol.post_created(a.lean, a.partition, a.offset, cursors.encode(self.epoch, marks))
                if self.hub.cursor_connections
                else None
            )
            self.hub.publish(
                protocol.post_created(a.lean, a.partition, a.offset),
                facts,
                with_cursor,
                (a.partition, a.offset, a.lang),
                self.epoch,
            )
            self.metrics.delivery_seconds.observe(time.perf_counter() - arrived[(a.partition, a.offset)])
            if n % self.yield_every == 0:
                # Let every writer hand the queued messages to its socket: a burst never
                # fills the queue of a client that is reading.
                await asyncio.sleep(0)
        for p in ready:  # every record of the batch is announced now, those announcing nothing included
            cursors.advance(marks, p.partition, (p.offset + 1, ""))
        await asyncio.sleep(0)
