"""Property: walking every page of GET /posts in either direction, while new posts keep arriving
through the log, never skips and never repeats a post. Posts share published_at in groups, so
the id tie-break is exercised too."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import aiohttp
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from tests.support.events import locale_ev, post_ev
from tests.support.stack import BASE, ServiceStack, auth, running_stack
from tickerwire.schemas.models import PostEvent

pytestmark = pytest.mark.e2e

START = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=1)
INITIAL = 45


class Feed:
    """What has been published: (published_at, id) of every visible post."""

    def __init__(self) -> None:
        self.keys: list[tuple[datetime, int]] = []
        self.next_id = 1

    def make(self, count: int, at: datetime, status: str = "published") -> list[PostEvent]:
        events = []
        for _ in range(count):
            events.append(
                post_ev(self.next_id, at=at, emitted_at=at, status=status, sentiment="NEUTRAL", tickers=(), hashtags=())
            )
            if status == "published":
                self.keys.append((at, self.next_id))
            self.next_id += 1
        return events

    def newest_first(self) -> list[int]:
        return [i for _, i in sorted(self.keys, reverse=True)]


@pytest.fixture(scope="module")
async def paging(pg_dsn, kafka_bootstrap):
    feed = Feed()
    locale = locale_ev("en-US", default=True, name="English")
    events: list = [locale]
    for n in range(INITIAL // 3):  # groups of three posts share one published_at
        events += feed.make(3, START + timedelta(minutes=n))
        events += feed.make(1, START + timedelta(minutes=n, seconds=30), status="draft")
    async with running_stack(pg_dsn, kafka_bootstrap, "apipaging", events) as (stack, key):
        yield stack, key, feed


async def _walk(
    stack: ServiceStack, key: str, feed: Feed, limit: int, upward: bool, start: int, arrivals: list[int]
) -> None:
    url = stack.of("api")[0].url + BASE + "/posts"
    async with aiohttp.ClientSession() as http:

        async def page(**params) -> dict:
            async with http.get(
                url, params={"limit": str(limit), **{k: str(v) for k, v in params.items()}}, headers=auth(key)
            ) as resp:
                assert resp.status == 200, await resp.text()
                return await resp.json()

        async def arrive(step: int) -> None:
            count = arrivals[step] if step < len(arrivals) else 0
            if count:
                at = max(k[0] for k in feed.keys) + timedelta(seconds=1)
                await stack.publish(feed.make(count, at))
                await stack.wait_projected()

        seen: list[int] = []
        if upward:
            start_id = feed.newest_first()[start]
            cursor, step = start_id, 0
            while True:
                doc = await page(after=cursor)
                if not doc["posts"]:
                    break
                ids = [p["id"] for p in doc["posts"]]
                seen += reversed(ids)
                cursor = ids[0]
                await arrive(step)
                step += 1
            everything = feed.newest_first()  # including every post that arrived during the walk
            expected = list(reversed(everything[: everything.index(start_id)]))
        else:
            expected = feed.newest_first()
            doc, step = await page(), 0
            while True:
                seen += [p["id"] for p in doc["posts"]]
                await arrive(step)
                step += 1
                if doc["next_cursor"] is None:
                    break
                doc = await page(before=doc["next_cursor"])
        assert len(seen) == len(set(seen)), "a post was repeated"
        assert seen == expected, "a post was skipped or misordered"


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    limit=st.integers(1, 12),
    upward=st.booleans(),
    start=st.integers(0, INITIAL - 1),
    arrivals=st.lists(st.integers(0, 3), max_size=4),
)
@example(limit=2, upward=False, start=0, arrivals=[2, 0, 3])
@example(limit=3, upward=True, start=20, arrivals=[3, 1])
def test_walking_pages_while_posts_arrive_never_skips_or_repeats(paging, limit, upward, start, arrivals):
    stack, key, feed = paging
    before = feed.next_id
    asyncio.run(_walk(stack, key, feed, limit, upward, start, arrivals))
    assert feed.next_id > before or not any(arrivals), "posts were meant to arrive during the walk"
