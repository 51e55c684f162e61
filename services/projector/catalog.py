"""The catalog as posts see it: the taxonomy a batch of posts renders with, and, after an
assignment, the catalog applied before the posts (:class:`CatalogFirst`)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Iterable, Mapping, Protocol

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from tickerwire.schemas.models import Category
from tickerwire.schemas.topics import CATALOG, POSTS, topic_name

from ..readmodel.mapping import Taxonomy
from ..readmodel.taxonomy import category_rows, decode_categories, load_default_locale
from .progress import PartitionProgress

log = logging.getLogger(__name__)


class Stopping(Protocol):
    """What knows the partitions stopped by the log watch (they stay paused)."""

    @property
    def stopped(self) -> Mapping[TopicPartition, object]: ...


#: The longest the posts partitions wait for the catalog to be applied after an assignment.
CATALOG_FIRST_MAX_S = 30.0


#: The last taxonomy :func:`load_taxonomy` built and what it was built from.
_last_taxonomy: tuple[list, str, Taxonomy] | None = None


async def load_taxonomy(conn: asyncpg.Connection) -> Taxonomy:
    """The taxonomy as ``conn`` reads it now; built again only when its rows differ from those
    of the last one built (every batch of posts reads it, categories rarely change)."""
    global _last_taxonomy
    rows, default = await category_rows(conn), await load_default_locale(conn)
    last = _last_taxonomy
    if last is not None and last[0] == rows and last[1] == default:
        return last[2]
    taxonomy = Taxonomy({r["slug"]: Category(**r) for r in decode_categories(rows)}, default)
    _last_taxonomy = (rows, default, taxonomy)
    return taxonomy


class CatalogFirst:
    """After an assignment, the posts partitions wait until the catalog partitions are applied up
    to their log end as it was then (at most ``CATALOG_FIRST_MAX_S``). A post's rows embed its
    categories' localized names: a post applied before its categories would be rendered again
    when they arrive, as a fresh projector reading both topics at once would do for thousands.
    The order changes nothing else: the two topics' partitions are independent either way."""

    def __init__(self, progress: PartitionProgress, prefix: str) -> None:
        self.progress, self.prefix = progress, prefix
        #: The catalog partitions still behind, and the log end each must reach.
        self.ends: dict[TopicPartition, int] = {}
        #: The posts partitions paused meanwhile.
        self.held: set[TopicPartition] = set()
        self.since = 0.0

    @contextlib.asynccontextmanager
    async def assigning(self, consumer: AIOKafkaConsumer | None, assigned: list[TopicPartition], watch: Stopping):
        """Around the handling of an assignment (the stored positions read, the consumer sought):
        the posts partitions paused at once, then held back while the catalog is behind, never
        left paused when the handling fails."""
        if consumer is None or not assigned:
            yield
            return
        self.pause(consumer, assigned)
        try:
            yield
        except BaseException:
            self.resume(consumer, watch.stopped)
            raise
        await self.hold(consumer, assigned, watch.stopped)

    def pause(self, consumer: AIOKafkaConsumer, assigned: list[TopicPartition]) -> None:
        """Pause the posts partitions of ``assigned`` if it has catalog partitions, at once: the
        consume loop fetches while the assignment is being handled."""
        self.release()
        if any(tp.topic == topic_name(self.prefix, CATALOG) for tp in assigned):
            self.held = {tp for tp in assigned if tp.topic == topic_name(self.prefix, POSTS)}
            self.since = time.monotonic()
            if self.held:
                consumer.pause(*self.held)

    async def hold(
        self, consumer: AIOKafkaConsumer, assigned: list[TopicPartition], stopped: Iterable[TopicPartition]
    ) -> None:
        """Once the stored positions of ``assigned`` are known: keep the posts partitions paused
        while a catalog partition is behind the end of its log, else resume them now."""
        if not self.held:
            return
        catalog = [tp for tp in assigned if tp.topic == topic_name(self.prefix, CATALOG)]
        try:
            ends = await consumer.end_offsets(catalog)
        except KafkaError as exc:
            log.info("catalog log ends unknown (%s): posts are not held back", exc)
            ends = {}
        self.ends = {tp: end for tp, end in ends.items() if not self.progress.reached(tp, end)}
        self.resume_when_done(consumer, stopped)

    def resume_when_done(self, consumer: AIOKafkaConsumer, stopped: Iterable[TopicPartition]) -> None:
        """Resume the held posts partitions (those not stopped) once the catalog reached its ends."""
        if not self.held:
            return
        done = all(self.progress.reached(tp, end) for tp, end in self.ends.items())
        if not done and time.monotonic() - self.since < CATALOG_FIRST_MAX_S:
            return
        if not done:
            log.warning("the catalog is not applied after %.0f s; posts are applied meanwhile", CATALOG_FIRST_MAX_S)
        self.resume(consumer, stopped)

    def resume(self, consumer: AIOKafkaConsumer, stopped: Iterable[TopicPartition]) -> None:
        """Resume the held posts partitions still assigned and not stopped; hold nothing more."""
        assigned, stopped = consumer.assignment(), set(stopped)
        consumer.resume(*(tp for tp in self.held if tp in assigned and tp not in stopped))
        self.release()

    def release(self) -> None:
        self.ends, self.held = {}, set()
