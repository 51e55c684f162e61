"""A slow trickle of new demo posts, so the stream and the newest pages have something to show.

The posts are built by :func:`tickerwire.devstack.demo.dataset.build_post`, like the seeded
ones, and handed to an injected ``publish`` coroutine: this module knows nothing of Kafka.
Start ``start_id`` above the last seeded id; each post is published at creation time, so
ids and published_at keep rising together.
"""

from __future__ import annotations

import asyncio
import logging
import random
from datetime import datetime, timezone
from typing import Awaitable, Callable, Sequence

from tickerwire.schemas.models import PostEvent, PostStatus

from .dataset import LISTED_LOCALES, TickerPool, build_post, ticker_pool

log = logging.getLogger(__name__)


def next_post(
    rng: random.Random,
    *,
    post_id: int,
    now: datetime,
    locales: Sequence[str],
    pool: TickerPool | None = None,
) -> PostEvent:
    """A new published post with id ``post_id``, published (and emitted) at ``now``.

    It is translated into some of ``locales`` (always the default locale when it is one of
    them) and mentions tickers from ``pool``, by default the popular tokens of seed 7.
    """
    return build_post(
        rng,
        post_id=post_id,
        status=PostStatus.published,
        published_at=now,
        emitted_at=now,
        locales=locales,
        pool=pool if pool is not None else ticker_pool(),
    )


async def _stopped(stop: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds; True if ``stop`` was set in the meantime."""
    try:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation racing
        # the stop, and `tickerwire up` cancels the trickle when it recovers the broker.
        async with asyncio.timeout(timeout):
            await stop.wait()
    except TimeoutError:
        return False
    return True


async def run_trickle(
    publish: Callable[[PostEvent], Awaitable[None]],
    *,
    start_id: int,
    interval_s: float,
    seed: int,
    stop: asyncio.Event | None = None,
) -> None:
    """Publish one new post every ``interval_s`` seconds until cancelled or ``stop`` is set.

    The first post goes out after one interval; ids rise by one from ``start_id``.
    """
    rng = random.Random(f"{seed}/trickle")
    pool = ticker_pool(seed)
    stop = stop or asyncio.Event()
    post_id = start_id
    while not await _stopped(stop, interval_s):
        event = next_post(rng, post_id=post_id, now=datetime.now(timezone.utc), locales=LISTED_LOCALES, pool=pool)
        await publish(event)
        log.info("published demo post", extra={"fields": {"post_id": post_id}})
        post_id += 1
