"""A slow trickle of demo posts that behaves like a 14-locale newsroom, so the stream, the
newest pages and resume cursors (docs/resume.md) have something real to show.

Every ``interval_s`` seconds the newsroom acts once (:class:`Newsroom`):

- Most often a new post goes out. About 40% go out ``partial``, in the default locale and a
  few others; their remaining translations land in one to three later versions, 1 to 24 ticks
  later (5 s to 2 min at the default interval), until the post is ``published``.
- Sometimes (about 10%) a recent post is edited: a new version, its titles updated; nothing new
  to announce.
- Sometimes (about 8%) a post goes out backdated, with a ``published_at`` 10 minutes to 6 hours
  ago: it sorts behind newer posts, as a late-filed story does.

A translation added later and a backdated post are exactly what ``GET /posts?after=<id>`` after a
reconnect cannot return; a resume cursor does. The posts are built by
:func:`tickerwire.devstack.demo.dataset.build_current_post` in the post event's current version,
as a platform team publishes today (the seeded month is version 1: the projector's upcaster
reads both), and handed to an injected ``publish`` coroutine: this module knows nothing of
Kafka. Start ``start_id`` above the last seeded id.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Awaitable, Callable, Sequence

from tickerwire.schemas.models import PostEventV2, PostStatus, PostTranslationV2

from .dataset import LISTED_LOCALES, TickerPool, build_current_post, ticker_pool

log = logging.getLogger(__name__)


def next_post(
    rng: random.Random,
    *,
    post_id: int,
    now: datetime,
    locales: Sequence[str],
    pool: TickerPool | None = None,
) -> PostEventV2:
    """A new published post with id ``post_id``, published (and emitted) at ``now``, in the post
    event's current version.

    It is translated into some of ``locales`` (always the default locale when it is one of
    them) and mentions tickers from ``pool``, by default the popular tokens of seed 7.
    """
    return build_current_post(
        rng,
        post_id=post_id,
        status=PostStatus.published,
        published_at=now,
        emitted_at=now,
        locales=locales,
        pool=pool if pool is not None else ticker_pool(),
    )


#: Shares of the newsroom's actions per tick (the rest: a new post published in full).
PARTIAL_SHARE = 0.40
EDIT_SHARE = 0.10
BACKDATED_SHARE = 0.08
#: Ticks until a partial post's next translations land.
LAND_AFTER_TICKS = (1, 24)
#: How far back a backdated post's published_at lies.
BACKDATED_BY = (timedelta(minutes=10), timedelta(hours=6))
#: Recent posts an edit picks from.
RECENT = 20


@dataclass
class _Pending:
    """A partial post whose translations land later: the full snapshot, how many translations are
    out, and the tick at which the next ones land."""

    full: PostEventV2
    out: int
    due: int


class Newsroom:
    """The newsroom's state across ticks: ids, versions, partial posts waiting for translations."""

    def __init__(self, rng: random.Random, *, start_id: int, locales: Sequence[str], pool: TickerPool) -> None:
        self.rng, self.locales, self.pool = rng, locales, pool
        self.next_id = start_id
        self.tick = 0
        self.pending: list[_Pending] = []
        #: The latest event of recent posts, by id (edits pick from them).
        self.latest: dict[int, PostEventV2] = {}
        #: The last version of every recent or pending post.
        self.versions: dict[int, int] = {}

    def step(self, now: datetime) -> list[PostEventV2]:
        """The events of one tick at ``now``: due translations first, then one newsroom action."""
        self.tick += 1
        events = [self._record(self._land(p, now)) for p in self.pending if p.due <= self.tick]
        self.pending = [p for p in self.pending if p.out < len(p.full.data.translations)]
        roll = self.rng.random()
        editable = sorted(set(self.latest) - {p.full.data.id for p in self.pending})
        if roll < EDIT_SHARE and editable:
            events.append(self._record(self._edit(now, self.rng.choice(editable))))
        else:
            backdated = roll < EDIT_SHARE + BACKDATED_SHARE
            at = (
                now - self.rng.uniform(*(b.total_seconds() for b in BACKDATED_BY)) * timedelta(seconds=1)
                if backdated
                else now
            )
            events.append(self._record(self._new(now, at, partial=self.rng.random() < PARTIAL_SHARE)))
        while len(self.latest) > RECENT:
            del self.latest[min(self.latest)]
        keep = set(self.latest) | {p.full.data.id for p in self.pending}
        self.versions = {i: v for i, v in self.versions.items() if i in keep}
        return events

    def _record(self, event: PostEventV2) -> PostEventV2:
        self.latest[event.data.id] = event
        self.versions[event.data.id] = event.version
        return event

    def _new(self, now: datetime, at: datetime, *, partial: bool) -> PostEventV2:
        full = next_post(self.rng, post_id=self.next_id, now=at, locales=self.locales, pool=self.pool)
        full = full.model_copy(update={"emitted_at": now})
        self.next_id += 1
        count = len(full.data.translations)
        if not partial or count < 2:
            return full
        pending = _Pending(
            full, self.rng.randint(1, max(1, min(3, count - 1))), self.tick + self.rng.randint(*LAND_AFTER_TICKS)
        )
        self.pending.append(pending)
        return _version(full, 1, now, full.data.translations[: pending.out], PostStatus.partial)

    def _land(self, pending: _Pending, now: datetime) -> PostEventV2:
        """The next translations of a partial post land (all of them, or some and more later)."""
        translations = pending.full.data.translations
        left = len(translations) - pending.out
        pending.out += left if left <= 2 or self.rng.random() < 0.5 else self.rng.randint(1, left - 1)
        pending.due = self.tick + self.rng.randint(*LAND_AFTER_TICKS)
        done = pending.out == len(translations)
        version = self.versions[pending.full.data.id] + 1
        return _version(
            pending.full,
            version,
            now,
            translations[: pending.out],
            PostStatus.published if done else PostStatus.partial,
        )

    def _edit(self, now: datetime, post_id: int) -> PostEventV2:
        """A recent post's titles are updated (same translations, same status; the story's
        ``updated_at`` is now)."""
        last = self.latest[post_id]
        edited = tuple(
            t.model_copy(update={"title": t.title.removesuffix(" (updated)") + " (updated)"})
            for t in last.data.translations
        )
        last = last.model_copy(update={"data": last.data.model_copy(update={"updated_at": now})})
        return _version(last, self.versions[last.data.id] + 1, now, edited, last.data.status)


def _version(
    event: PostEventV2, version: int, now: datetime, translations: Sequence[PostTranslationV2], status: PostStatus
) -> PostEventV2:
    return PostEventV2(
        version=version,
        emitted_at=now,
        data=event.data.model_copy(update={"translations": tuple(translations), "status": status}),
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
    publish: Callable[[PostEventV2], Awaitable[None]],
    *,
    start_id: int,
    interval_s: float,
    seed: int,
    stop: asyncio.Event | None = None,
) -> None:
    """Act as a newsroom (:class:`Newsroom`) every ``interval_s`` seconds until cancelled or
    ``stop`` is set. The first events go out after one interval; new ids rise by one from ``start_id``."""
    rng = random.Random(f"{seed}/trickle")
    newsroom = Newsroom(rng, start_id=start_id, locales=LISTED_LOCALES, pool=ticker_pool(seed))
    stop = stop or asyncio.Event()
    while not await _stopped(stop, interval_s):
        for event in newsroom.step(datetime.now(timezone.utc)):
            await publish(event)
            post = event.data
            log.info(
                "published demo post",
                extra={
                    "fields": {
                        "post_id": post.id,
                        "version": event.version,
                        "status": post.status.value,
                        "langs": len(post.translations),
                        "published_at": post.published_at.isoformat() if post.published_at else None,
                    }
                },
            )
