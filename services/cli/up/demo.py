"""What ``tickerwire up`` puts into the stack: the topics and the read model's schema, the demo
workspace, key and dataset, and the live trickle of posts."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ...common.runtime.retry import Backoff
from ..settings import FullConfig
from .broker import DemoState, OwnBroker, demo_key_id
from .output import say

if TYPE_CHECKING:  # imported lazily, by `up` only
    from tickerwire.schemas.models import AnyEvent

DEMO_WORKSPACE = "ws_demo"
DEMO_EMBED = "bdg_demo0001"


async def prepare(config: FullConfig) -> None:
    from ...common.db import connect
    from ...common.kafka import ensure_topics
    from ...readmodel.migrate import migrate

    await ensure_topics(config)
    async with connect(config.direct_url) as conn:
        await migrate(conn, config.read_model_schema)


async def publish_demo(config: FullConfig, args, own: OwnBroker | None) -> tuple[str, dict]:
    """Publish a demo workspace and key, and the demo dataset, unless the kept log of ``own``
    has them (then only a fresh badge heartbeat, so the key is served); returns (api key, marks)."""
    from tickerwire.devstack.demo import dataset

    from ...common.http.keys import display_prefix, generate_key, hash_key
    from ..publish import publish

    now = datetime.now(timezone.utc)
    saved = own.saved_demo() if own is not None else None
    events: list[AnyEvent] = [dataset.demo_heartbeat(now=now, workspace_id=DEMO_WORKSPACE, embed_id=DEMO_EMBED)]
    if saved is None:
        key = generate_key()
        saved = DemoState(key, demo_key_id(own), dataset=False)
        events = list(
            dataset.access_events(
                now=now,
                workspace_id=DEMO_WORKSPACE,
                key_hash=hash_key(key),
                display_prefix=display_prefix(key),
                key_id=saved.key_id,
                embed_id=DEMO_EMBED,
            )
        )
    if not args.no_demo and not saved.dataset:
        events += dataset.catalog_events(now=now, tokens=args.tokens)
        events += dataset.post_events(now=now, posts=args.posts)
        saved = DemoState(saved.api_key, saved.key_id, dataset=True)
    marks = await publish(config, events)
    if own is not None:
        own.save_demo(saved)  # after publishing: a log without the key never has it saved
    return saved.api_key, marks


async def wait_projected(
    config: FullConfig, marks: dict[tuple[str, int], int] | None = None, timeout: float = 120.0
) -> None:
    """Until the projector's stored positions reach the end of every partition of every topic.

    ``marks`` are offsets a publisher was acknowledged for; they are exact, whereas a broker's
    reported end offsets may lag behind recent writes (so both are waited for)."""
    from aiokafka import TopicPartition

    from ...common import kafka
    from ...common.db import connect
    from ...common.kafka.declaration import declared_topics
    from ...readmodel import positions

    consumer = kafka.consumer(config, group_id=None, client_id="tickerwire-up")
    try:
        await consumer.start()
        tps = [TopicPartition(d.name, p) for d in declared_topics(config) for p in range(d.partitions)]
        ends = {(tp.topic, tp.partition): end for tp, end in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()
    for key, mark in (marks or {}).items():
        ends[key] = max(ends.get(key, 0), mark)
    async with connect(config.direct_url, schema=config.read_model_schema) as conn:
        await positions.wait_until(conn, ends, timeout=timeout)


async def newest_post_id(config: FullConfig) -> int:
    """The highest post id the read model holds (0 when none): the trickle goes on above it."""
    from ...common.db import connect

    async with connect(config.direct_url, schema=config.read_model_schema) as conn:
        return int(await conn.fetchval("SELECT coalesce(max(id), 0) FROM posts"))


async def sweep(config: FullConfig) -> None:
    from ...common.db import connect
    from ...projector.sweeper import sweep_once

    async with connect(config.direct_url, schema=config.read_model_schema) as conn:
        await sweep_once(conn)


@dataclass
class Trickle:
    """The live demo trickle: it never takes anything down; it retries with backoff."""

    config: FullConfig
    next_id: int
    interval: float
    #: Pauses after a failed publish; short again once a post went out.
    backoff: Backoff = field(default_factory=lambda: Backoff(1.0, 30.0))

    async def run_forever(self) -> None:
        while True:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self.backoff.delay()
                say(f"demo trickle: publishing failed ({type(exc).__name__}: {exc}); retrying in {delay:.1f}s")
                await asyncio.sleep(delay)

    async def _run(self) -> None:
        from tickerwire.devstack.demo.trickle import run_trickle

        from ...common.kafka import started_producer
        from ..publish import send_events

        async with started_producer(self.config) as producer:

            async def publish(event) -> None:
                await send_events(producer, self.config.topic_prefix, [event])
                self.next_id = event.data.id + 1
                self.backoff.reset()  # published again: the next failure waits the short pause

            await run_trickle(publish, start_id=self.next_id, interval_s=self.interval, seed=random.randrange(1 << 30))
