"""The client library against the real processes (projector, API, stream) over real HTTP and
WebSocket: every endpoint, paging both ways, 429 retries, and the stream's promise — every
post exactly once and in order per locale across a killed and a silent stream process."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support.events import fresh_post_ev, webhook_endpoint_ev
from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tickerwire.devstack.demo import dataset
from tickerwire.schemas.models import PostEvent
from tickerwire.services.cli import admin
from tickerwire_client import (
    AsyncClient,
    Category,
    Client,
    CursorEpochChanged,
    InvalidState,
    NotAuthenticated,
    NotFound,
    PostFilter,
    PostStream,
    QuotaExhausted,
    RateLimited,
    RetryPolicy,
    Sentiment,
    TransportError,
    ValidationFailed,
    WebhookStatus,
    WorkspaceSuspended,
)

pytestmark = pytest.mark.e2e

DEMO_POSTS = 120
FLOW_LOCALES = ("en-US", "de-DE", "fr-FR")
CONSUMED = ("en-US", "de-DE")  # fr-FR is published too, and must never reach the application
WAIT = 60.0  # upper bound for anything to arrive (a failure, not a measurement)
README = Path(__file__).resolve().parents[2] / "clients" / "python" / "README.md"


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    env = {"TICKERWIRE_STREAM_PING_INTERVAL_S": "1"}
    async with started_stack(pg_dsn, kafka_bootstrap, f"client{os.getpid()}", **env) as s:
        now = datetime.now(timezone.utc)
        await s.publish(dataset.catalog_events(now=now, tokens=60) + dataset.post_events(now=now, posts=DEMO_POSTS))
        await s.wait_projected(timeout=180)
        await asyncio.sleep(1.0)  # the API reloads its catalog caches shortly after a change
        yield s


@pytest.fixture(scope="module")
async def key(stack: ServiceStack) -> str:
    return await stack.provision("ws_client", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)


def api_url(stack: ServiceStack) -> str:
    return stack.of("api")[0].url + BASE


def stream_base(port: int) -> str:
    return f"ws://127.0.0.1:{port}{BASE}"


async def raw(stack: ServiceStack, key: str, path: str, **params) -> dict:
    async with aiohttp.ClientSession() as http:
        async with http.get(api_url(stack) + path, params=params, headers=auth(key)) as resp:
            assert resp.status == 200, await resp.text()
            return orjson.loads(await resp.read())


def flow_post(post_id: int, tickers: tuple[str, ...] = ("BTC",)) -> PostEvent:
    return fresh_post_ev(post_id, langs=FLOW_LOCALES, tickers=tickers, sentiment="NEUTRAL", importance=40, hashtags=())


# ---------------------------------------------------------------------------------------------- endpoints


async def test_every_endpoint_returns_typed_models_equal_to_the_wire(stack: ServiceStack, key: str):
    async with AsyncClient(api_url(stack), key) as client:
        languages = await client.languages()
        assert [x.code for x in languages.languages] == [
            x["code"] for x in (await raw(stack, key, "/languages"))["languages"]
        ]
        assert languages.default.code == "en-US" and len(languages.languages) == 14

        page = await client.posts(lang="de-DE", limit=5)
        wire = await raw(stack, key, "/posts", lang="de-DE", limit="5")
        assert [p.id for p in page.posts] == [p["id"] for p in wire["posts"]] and page.next_cursor == wire[
            "next_cursor"
        ]
        assert all(p.lang == "de-DE" and isinstance(p.sentiment, Sentiment) for p in page.posts)
        assert page.meta.log_position is not None and len(page.meta.log_position.offsets) == 4  # the consistency mark
        limits = page.meta.limits
        assert (
            limits.rate_limit == 1_000_000 and limits.rate_remaining < 1_000_000 and limits.quota_limit == 1_000_000_000
        )

        first = page.posts[0]
        detail = await client.post(first.id, lang="de-DE")
        assert detail.id == first.id and detail.title == first.title and detail.body
        assert (await client.post(first.slug, lang="de-DE")).id == first.id
        with pytest.raises(NotFound):
            await client.post(9_999_999)

        tree = await client.categories(lang="fr-FR")
        assert len(tree.groups) == 7 and all(len(g.leaves) == 5 for g in tree.groups)
        group = await client.category(tree.groups[0].slug, lang="fr-FR")
        leaf = await client.category(tree.groups[0].leaves[0].slug)
        assert isinstance(group, Category) and group.is_group and group.group is None and len(group.leaves) == 5
        assert not leaf.is_group and leaf.group.slug == group.slug and leaf.leaves is None

        tokens = await client.tokens()
        assert len(tokens.tokens) == len((await raw(stack, key, "/tokens"))["tokens"]) == 60
        token = await client.token(tokens.tokens[0].ticker.lower())
        assert token.ticker == tokens.tokens[0].ticker and token.homepage_url

        pulse = await client.sentiment_pulse()
        assert pulse.window == "24h" and set(pulse.breakdown) == set(Sentiment)

        word = next(w for w in first.title.split() if len(w) >= 4)
        found = await client.search(word, lang="de-DE", limit=10)
        assert found.posts and [p.id for p in found.posts] == [
            p["id"] for p in (await raw(stack, key, "/search", q=word, lang="de-DE", limit="10"))["posts"]
        ]

        bullish = await client.posts(PostFilter(sentiment=[Sentiment.BULLISH], importance_min=50), lang="de-DE")
        wire = await raw(stack, key, "/posts", sentiment="BULLISH", importance_min="50", lang="de-DE")
        assert bullish.posts and [p.id for p in bullish.posts] == [p["id"] for p in wire["posts"]]
        with pytest.raises(ValidationFailed) as exc:
            await client.posts(sentiment=["BULLISH", "EUPHORIC"])
        assert exc.value.field == "sentiment" and exc.value.status == 422
        assert exc.value.meta is not None and exc.value.meta.status == 422  # the error's own meta
    async with AsyncClient(api_url(stack), "tw_live_" + "x" * 43) as client:
        with pytest.raises(NotAuthenticated):
            await client.languages()


async def test_the_sync_client_gives_the_same_results(stack: ServiceStack, key: str):
    def run() -> tuple[list[int], list[str], int]:
        with Client(api_url(stack), key) as client:
            ids = [p.id for p in client.iter_posts(lang="en-US", limit=50)]
            codes = [x.code for x in client.languages().languages]
            try:
                client.post(9_999_999)
            except NotFound as exc:
                return ids, codes, exc.status
        raise AssertionError("no NotFound")

    ids, codes, status = await asyncio.to_thread(run)
    async with AsyncClient(api_url(stack), key) as client:
        assert ids == [p.id async for p in client.iter_posts(lang="en-US")]
        assert codes == [x.code for x in (await client.languages()).languages]
    assert status == 404


async def test_iteration_walks_every_page_in_both_directions(stack: ServiceStack, key: str):
    async with AsyncClient(api_url(stack), key) as client:
        truth: list[int] = []
        cursor = None
        while True:  # the wire, page by page
            body = await raw(stack, key, "/posts", lang="en-US", limit="50", **({"before": cursor} if cursor else {}))
            truth += [p["id"] for p in body["posts"]]
            if not (cursor := body["next_cursor"]):
                break
        assert len(truth) > 50  # several pages

        older = [p.id async for p in client.iter_posts(lang="en-US", limit=7)]
        assert older == truth
        newer = [p.id async for p in client.iter_posts(direction="newer", lang="en-US", after=truth[-1], limit=7)]
        assert newer == list(reversed(truth[:-1]))

        word = next(w for w in (await client.posts(limit=1)).posts[0].title.split() if len(w) >= 4)
        ranked = [p.id async for p in client.iter_search(word, limit=3)]
        assert len(ranked) > 3 and len(set(ranked)) == len(ranked)
        assert [p.id async for p in client.iter_search(word, direction="newer", after=ranked[-1], limit=3)] == list(
            reversed(ranked[:-1])
        )


async def test_changes_walks_every_announcement_after_a_cursor_with_its_resume_cursor(stack: ServiceStack, key: str):
    async with AsyncClient(api_url(stack), key) as client:
        head = await client.changes(lang=list(CONSUMED))
        assert head.posts == [] and head.has_more is False and head.cursor.startswith("c1~")
        assert head.meta is not None and head.meta.status == 200
        ids = list(range(90_001, 90_008))  # ids no other test of this module publishes
        await stack.publish([flow_post(i) for i in ids])
        await stack.wait_projected()

        pages = [page async for page in client.iter_changes(head.cursor, lang=list(CONSUMED), limit=3)]
        walked = [(p.id, p.lang) for page in pages for p in page.posts]
        assert sorted(walked) == sorted((i, lang) for i in ids for lang in CONSUMED)  # fr-FR filtered out
        assert len(pages) >= 5 and all(page.has_more for page in pages[:-1]) and not pages[-1].has_more
        wire, cursor = [], head.cursor  # the same walk on the wire, page by page
        while True:
            body = await raw(stack, key, "/changes", cursor=cursor, lang="en-US,de-DE", limit="3")
            wire += [(p["id"], p["lang"]) for p in body["posts"]]
            cursor = body["cursor"]
            if not body["has_more"]:
                break
        assert walked == wire and pages[-1].cursor == cursor
        # Resuming from any page's cursor gives exactly what followed it.
        middle = pages[1]
        rest = [
            (p.id, p.lang) async for page in client.iter_changes(middle.cursor, lang=list(CONSUMED)) for p in page.posts
        ]
        assert rest == walked[sum(len(page.posts) for page in pages[:2]) :]
        assert (await client.changes(pages[-1].cursor, lang=list(CONSUMED))).posts == []  # nothing new since

        foreign = re.sub(r"^c1~[0-9a-z]+", "c1~0000deadbeef", head.cursor)
        with pytest.raises(CursorEpochChanged) as epoch:
            await client.changes(foreign)
        assert epoch.value.status == 409 and epoch.value.field == "cursor" and isinstance(epoch.value, InvalidState)
        with pytest.raises(ValidationFailed) as malformed:
            await client.changes("not-a-cursor")
        assert malformed.value.field == "cursor"

    def blocking() -> list[tuple[int, str]]:
        with Client(api_url(stack), key) as sync:
            return [(p.id, p.lang) for page in sync.iter_changes(head.cursor, lang=list(CONSUMED)) for p in page.posts]

    assert await asyncio.to_thread(blocking) == walked


async def test_the_webhook_endpoint_reads_return_the_workspaces_own_endpoints(stack: ServiceStack, key: str):
    other = await stack.provision("ws_client_hooks_other")
    await stack.publish(
        [
            webhook_endpoint_ev("whe_pyreads01", "ws_client", 1, url="http://127.0.0.1:9/a", locales=["en-US"]),
            webhook_endpoint_ev("whe_pyreads02", "ws_client_hooks_other", 1, url="http://127.0.0.1:9/b"),
        ]
    )
    await stack.wait_projected()
    async with AsyncClient(api_url(stack), key) as client:
        listed = await client.webhook_endpoints()
        assert [e.id for e in listed.endpoints] == ["whe_pyreads01"] and listed.meta.status == 200
        one = await client.webhook_endpoint("whe_pyreads01")
        wire = await raw(stack, key, "/webhooks/endpoints/whe_pyreads01")
        assert (one.id, one.url, one.status, one.filters.locales, one.filters.tickers) == (
            wire["id"],
            wire["url"],
            WebhookStatus.ACTIVE,
            ["en-US"],
            None,
        )
        assert one.created_at.isoformat().startswith(wire["created_at"][:19]) and one.attempt == 0
        attempts = await client.webhook_attempts("whe_pyreads01", limit=5)
        assert attempts.attempts == [] and attempts.meta.status == 200  # no dispatcher in this stack
        with pytest.raises(NotFound):  # another workspace's id answers as an unknown one
            await client.webhook_endpoint("whe_pyreads02")
        with pytest.raises(ValidationFailed) as exc:
            await client.webhook_attempts("whe_pyreads01", limit=101)
        assert exc.value.field == "limit"
    async with AsyncClient(api_url(stack), other) as client:
        assert [e.id for e in (await client.webhook_endpoints()).endpoints] == ["whe_pyreads02"]


@pytest.mark.slow
async def test_a_429_is_retried_after_retry_after_and_limits_are_exposed(stack: ServiceStack):
    key = await stack.provision("ws_client_limited", rate_limit_per_minute=3)
    if (second := datetime.now(timezone.utc).second) > 50:  # all four calls in one fixed minute window
        await asyncio.sleep(61 - second)
    async with AsyncClient(api_url(stack), key, retry=RetryPolicy(max_attempts=1)) as strict:
        for _ in range(3):
            await strict.languages()
        with pytest.raises(RateLimited) as exc:  # no retries allowed: raised, with its headers
            await strict.languages()
    retry_after = exc.value.retry_after
    assert (
        1 <= retry_after <= 60 and exc.value.meta.limits.rate_remaining == 0 and exc.value.meta.limits.rate_limit == 3
    )
    # A retrying client gets the 429 too, waits its Retry-After once and succeeds in the next minute.
    async with AsyncClient(
        api_url(stack), key, retry=RetryPolicy(max_attempts=3, max_total_wait=65, max_call_time=70)
    ) as client:
        started = time.monotonic()
        result = await client.languages()
        elapsed = time.monotonic() - started
    assert result.languages and client.retries == 1
    assert retry_after - 2 <= elapsed <= retry_after + 5
    assert result.meta.limits.rate_limit == 3 and result.meta.limits.rate_remaining == 2


async def test_an_exhausted_daily_quota_is_raised_at_once_rather_than_slept_on(stack: ServiceStack):
    key = await stack.provision("ws_client_quota", daily_quota=2)
    async with AsyncClient(api_url(stack), key, retry=RetryPolicy(max_attempts=5, max_total_wait=30)) as client:
        await client.languages()
        await client.languages()
        started = time.monotonic()
        with pytest.raises(QuotaExhausted) as exc:
            await client.languages()
        assert time.monotonic() - started < 5 and client.retries == 0
        assert exc.value.retry_after > 30 and exc.value.meta.limits.quota_remaining == 0


# ---------------------------------------------------------------------------------------------- the stream


class Flow:
    """Publishes posts (in three locales) one after another, until stopped."""

    def __init__(self, stack: ServiceStack, first_id: int) -> None:
        self.stack = stack
        self.next_id = first_id
        self.published: list[int] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        async with self.stack.publisher() as send:
            while not self._stop.is_set():
                await send([flow_post(self.next_id)])
                self.published.append(self.next_id)
                self.next_id += 1
                await asyncio.sleep(0.03)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> list[int]:
        self._stop.set()
        await self._task
        return self.published


class App:
    """What the application sees, per locale."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.seen: dict[str, list[int]] = {}
        self.sources: dict[str, int] = {}
        self.unmarked_pushes = 0
        self.task = asyncio.create_task(self._consume())

    async def _consume(self) -> None:
        async for item in self.stream:
            self.seen.setdefault(item.post.lang, []).append(item.post.id)
            self.sources[item.source] = self.sources.get(item.source, 0) + 1
            self.unmarked_pushes += item.source == "stream" and item.log_mark is None

    async def until_seen(self, expected: list[int], timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while any(set(expected) - set(self.seen.get(lang, [])) for lang in CONSUMED):
            if self.task.done():
                self.task.result()
            assert time.monotonic() < deadline, {
                lang: sorted(set(expected) - set(self.seen.get(lang, []))) for lang in CONSUMED
            }
            await asyncio.sleep(0.1)

    async def until(self, condition, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline and not self.task.done()
            await asyncio.sleep(0.05)


def stream_options() -> dict:
    # A 2 s reorder window: these tests run beside other xdist workers on two cores, where the
    # partitions' commits can drift further apart than the default 0.5 s (then a post arrives
    # marked late, by design: tests/clients/test_client_logic.py pins the window's rules).
    return dict(
        langs=list(CONSUMED),
        silence_timeout=3.0,
        backoff_base=0.2,
        backoff_cap=1.0,
        connect_timeout=2.0,
        reorder_window=2.0,
    )


def assert_exactly_once_in_order(app: App, published: list[int]) -> None:
    for lang in CONSUMED:
        ours = [i for i in app.seen.get(lang, []) if i in set(published)]
        assert ours == published, lang  # every post once, in publication (= id) order
    assert "fr-FR" not in app.seen


async def deliver_through(stack: ServiceStack, key: str, first_id: int, disrupt) -> tuple[App, PostStream]:
    """A client streams while posts are published steadily and ``disrupt(service, stream)``
    happens mid-flow; returns once the application saw every post exactly once, in order."""
    service = stack.of("stream")[0]
    async with AsyncClient(api_url(stack), key, stream_url=stream_base(service.port)) as client:
        stream = client.stream(**stream_options())
        app = App(stream)
        try:
            await app.until(lambda: stream.stats.connects >= 1)
            flow = Flow(stack, first_id)
            flow.start()
            await asyncio.sleep(1.5)
            await disrupt(service, stream, app)
            await asyncio.sleep(2.0)
            published = await flow.stop()
            await stack.wait_projected()
            await app.until_seen(published)
            await asyncio.sleep(1.5)  # anything delivered twice would show up now
            assert_exactly_once_in_order(app, published)
            assert app.unmarked_pushes == 0  # every push carries its log_position
            return app, stream
        finally:
            await stream.close()
            app.task.cancel()


async def test_a_killed_stream_process_loses_and_repeats_nothing(stack: ServiceStack, key: str):
    async def kill_and_restart(service, stream, app) -> None:
        stack.stop(service, signal.SIGKILL)
        await asyncio.sleep(1.5)  # posts committed now are never pushed: the new process does not replay
        await stack.start("stream", port=service.port)

    app, stream = await deliver_through(stack, key, 100_001, kill_and_restart)
    assert stream.stats.connects >= 2
    assert app.sources.get("gap_fill", 0) > 0 and app.sources.get("stream", 0) > 0


async def test_a_silent_stream_is_left_after_the_silence_timeout_and_nothing_is_lost(stack: ServiceStack, key: str):
    async def stop_for_longer_than_the_silence_timeout(service, stream, app) -> None:
        service.proc.send_signal(signal.SIGSTOP)  # the connection stays open, and silent
        try:
            await app.until(lambda: stream.stats.reconnects_after_silence >= 1, timeout=15)
            await asyncio.sleep(2.0)  # a reconnect to the stopped process hangs meanwhile
        finally:
            service.proc.send_signal(signal.SIGCONT)

    app, stream = await deliver_through(stack, key, 200_001, stop_for_longer_than_the_silence_timeout)
    assert stream.stats.reconnects_after_silence >= 1 and stream.stats.connects >= 2
    assert app.sources.get("gap_fill", 0) > 0


async def test_stream_filters_reach_the_server_and_the_gap_fill(stack: ServiceStack, key: str):
    port = stack.of("stream")[0].port
    async with AsyncClient(api_url(stack), key, stream_url=stream_base(port)) as client:
        async with client.stream(**(stream_options() | {"tickers": ["ETH"]})) as stream:
            app = App(stream)
            await app.until(lambda: stream.stats.connects >= 1)
            await stack.publish([flow_post(400_001), flow_post(400_002, tickers=("ETH", "SOL"))])
            await app.until_seen([400_002])
            await asyncio.sleep(1.0)
            assert {lang: [i for i in ids if i > 400_000] for lang, ids in app.seen.items()} == {
                lang: [400_002] for lang in CONSUMED
            }


async def test_a_restarted_application_resumes_from_its_cursors_without_a_gap(stack: ServiceStack, key: str):
    port = stack.of("stream")[0].port
    async with AsyncClient(api_url(stack), key, stream_url=stream_base(port)) as client:
        async with client.stream(**stream_options()) as stream:
            app = App(stream)
            await app.until(lambda: stream.stats.connects >= 1)
            await stack.publish([flow_post(500_001)])
            await app.until_seen([500_001])
            cursors = stream.cursors()
        assert cursors == {lang: 500_001 for lang in CONSUMED}
        missed = [500_002, 500_003, 500_004]  # published while the application was down
        await stack.publish([flow_post(i) for i in missed])
        await stack.wait_projected()
        async with client.stream(**stream_options(), start_after=cursors) as stream:
            app = App(stream)
            await app.until_seen(missed)
            await asyncio.sleep(1.0)
            assert app.seen == {lang: missed for lang in CONSUMED} and app.sources == {"gap_fill": 6}


async def test_cursors_say_what_the_application_took_not_what_was_queued(stack: ServiceStack, key: str):
    """Resuming from ``cursors()`` must not skip posts that were queued but never taken."""
    port = stack.of("stream")[0].port
    async with AsyncClient(api_url(stack), key, stream_url=stream_base(port)) as client:
        async with client.stream(**stream_options()) as stream:
            await asyncio.wait_for(_until(lambda: stream.stats.connects >= 1), WAIT)
            start = stream.cursors()
            await stack.publish([flow_post(i) for i in (600_001, 600_002, 600_003)])
            # Every post delivered to the queue (3 per consumed locale), none taken yet.
            await asyncio.wait_for(
                _until(lambda: all(line.counters.delivered >= 3 for line in stream.lines.values())), WAIT
            )
            first = await asyncio.wait_for(anext(stream), WAIT)
            assert first.post.id == 600_001
            assert stream.cursors() == {**start, first.post.lang: 600_001}


async def test_an_exhausted_daily_quota_does_not_stop_the_stream(stack: ServiceStack):
    """docs/api.md#what-counts: stream messages do not count against the quota. The gap-fill (an API call) is
    refused; the pushes still reach the application, and the gap-fill waits its Retry-After."""
    quota_key = await stack.provision("ws_client_stream_quota", daily_quota=1)
    port = stack.of("stream")[0].port
    newest = (await raw(stack, quota_key, "/posts", limit="1"))["posts"][0]["id"]  # the whole quota
    async with AsyncClient(api_url(stack), quota_key, stream_url=stream_base(port)) as client:
        with pytest.raises(QuotaExhausted):
            await client.languages()
        # Locale codes in any case (BCP 47): the posts say de-DE and en-US.
        options = stream_options() | {"langs": ["en-us", "DE-de"], "start_after": newest}
        async with client.stream(**options) as stream:
            app = App(stream)
            await app.until(lambda: stream.stats.connects >= 1 and stream.stats.gap_fills_deferred >= 1)
            await stack.publish([flow_post(700_001), flow_post(700_002)])
            await app.until_seen([700_001, 700_002])
            assert app.sources.get("stream", 0) >= 4 and stream.stats.connects == 1  # the connection was kept


async def test_a_gap_longer_than_a_minutes_allowance_is_filled_over_minutes_even_across_a_reconnect(
    stack: ServiceStack, key: str
):
    """The gap-fill counts against the rate limit (3 a minute here); a gap of 160 posts needs
    more pages than a minute allows (the client does not retry: each 429 defers the fill). Each deferral resumes where the fill had read to (it
    used to start over from its first cursor, so such a gap was never filled), and so does the
    fill of a connection made while it is deferred (it used to start after the newest push,
    dropping the gap). Every post arrives once; the gap's posts may be late, never lost."""
    limited = await stack.provision("ws_client_gap_limited", rate_limit_per_minute=3)
    service = stack.of("stream")[0]
    newest = (await raw(stack, key, "/posts", limit="1", lang="en-US"))["posts"][0]["id"]
    async with AsyncClient(
        api_url(stack), limited, stream_url=stream_base(service.port), retry=RetryPolicy(max_attempts=1)
    ) as client:
        async with client.stream(**(stream_options() | {"langs": ["en-US"], "start_after": newest})) as stream:
            app = App(stream)
            await app.until(lambda: stream.stats.connects >= 1 and stream.stats.gap_fill_requests >= 1)
            await asyncio.sleep(0.5)  # its first gap-fill (one empty page) is over
            stack.stop(service, signal.SIGKILL)
            gap = list(range(800_001, 800_161))
            await stack.publish([flow_post(i) for i in gap])
            await stack.wait_projected()
            service = await stack.start("stream", port=service.port)
            await app.until(lambda: stream.stats.gap_fills_deferred >= 1, timeout=2 * WAIT)
            # While the fill is deferred, a new post is pushed and delivered (it is newer than
            # the whole gap); then the connection is lost and made again, still deferred.
            await stack.publish([flow_post(800_200)])
            await app.until(lambda: 800_200 in app.seen.get("en-US", []))
            stack.stop(service, signal.SIGKILL)
            await stack.start("stream", port=service.port)
            deadline = time.monotonic() + 4 * WAIT  # a few rate-limit minutes
            while set(gap + [800_200]) - set(app.seen.get("en-US", [])):
                assert time.monotonic() < deadline and not app.task.done(), sorted(
                    set(gap) - set(app.seen.get("en-US", []))
                )[:5]
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
            ours = [i for i in app.seen["en-US"] if i >= 800_001]
            assert sorted(ours) == gap + [800_200] and len(ours) == len(set(ours))  # each once
            assert stream.stats.gap_fills_deferred >= 1


async def test_a_sixth_connection_waits_its_retry_after(stack: ServiceStack):
    """A 429 at the handshake is the workspace's connection limit (5): the client waits the
    server's Retry-After (10 s) instead of its own short back-off, and connects once a slot frees."""
    limit_key = await stack.provision("ws_client_stream_limit")
    port = stack.of("stream")[0].port
    async with aiohttp.ClientSession() as http:
        held = [await http.ws_connect(f"{stream_base(port)}/stream?key={limit_key}") for _ in range(5)]
        async with AsyncClient(api_url(stack), limit_key, stream_url=stream_base(port)) as client:
            async with client.stream(**stream_options(), start_after=1) as stream:
                await asyncio.wait_for(_until(lambda: stream.stats.connect_failures >= 1), WAIT)
                await asyncio.sleep(4.0)
                assert stream.stats.connect_failures == 1 and stream.stats.connects == 0  # back-off alone: 1 s at most
                await held.pop().close()
                await asyncio.wait_for(_until(lambda: stream.stats.connects == 1), 30)
        for ws in held:
            await ws.close()


async def test_a_call_to_a_server_that_never_answers_ends_within_max_call_time():
    async def silent(reader, writer):
        await asyncio.sleep(60)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}{BASE}"
    try:
        async with AsyncClient(
            url, "tw_live_" + "x" * 43, timeout=15.0, retry=RetryPolicy(max_call_time=2.0)
        ) as client:
            started = time.monotonic()
            with pytest.raises(TransportError):
                await client.languages()
            assert time.monotonic() - started < 3.0
    finally:
        server.close()


async def _until(condition, every: float = 0.05) -> None:
    while not condition():
        await asyncio.sleep(every)


async def test_a_refused_key_or_a_suspension_ends_the_stream_with_its_error(stack: ServiceStack, key: str):
    port = stack.of("stream")[0].port
    async with AsyncClient(api_url(stack), "tw_live_" + "x" * 43, stream_url=stream_base(port)) as client:
        stream = client.stream(langs=["en-US"], start_after=1)  # no HTTP call first: the handshake is refused
        with pytest.raises(NotAuthenticated):
            await asyncio.wait_for(anext(stream), WAIT)
        await stream.close()

    suspended_key = await stack.provision("ws_client_suspended")
    async with AsyncClient(api_url(stack), suspended_key, stream_url=stream_base(port)) as client:
        async with client.stream(**stream_options()) as stream:
            app = App(stream)
            await app.until(lambda: stream.stats.connects >= 1)
            conn = await stack.read_conn()
            try:
                await stack.publish([await admin.workspace_event(conn, "ws_client_suspended", status="suspended")])
            finally:
                await conn.close()
            with pytest.raises(WorkspaceSuspended):  # close code 4003, raised to the application
                await asyncio.wait_for(app.task, WAIT)


async def test_the_readme_example_lists_posts_then_streams_new_ones(stack: ServiceStack, key: str, tmp_path: Path):
    text = README.read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(example.strip().splitlines()) <= 12
    state = tmp_path / ".tickerwire"
    state.mkdir()
    port = stack.of("stream")[0].port
    (state / "up.json").write_bytes(
        orjson.dumps(
            {"base_url": api_url(stack), "stream_url": f"{stream_base(port)}/stream?key={key}", "api_key": key}
        )
    )
    (tmp_path / "example.py").write_text(example)
    env = dict(os.environ, PYTHONPATH=str(README.parent / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-u", "example.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []

        async def read_until(predicate) -> None:
            while not predicate():
                line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), WAIT)
                assert line, "".join(lines)
                lines.append(line)

        await read_until(lambda: len(lines) >= 5)  # five listed posts
        newest = (await raw(stack, key, "/posts", lang="en-US", limit="5"))["posts"]
        assert [int(line.split()[0]) for line in lines[:5]] == [p["id"] for p in newest]
        await asyncio.sleep(1.0)  # the example is connected by now
        await stack.publish([flow_post(300_001)])
        await read_until(lambda: any("300001" in line for line in lines[5:]))
    finally:
        proc.kill()
        proc.wait()


def test_closing_a_sync_client_closes_its_streams_and_leaves_no_task_behind(tmp_path: Path):
    """Run as its own process, so what Python says at exit about pending tasks is seen."""
    script = tmp_path / "close.py"
    script.write_text(
        "import time\n"
        "from tickerwire_client import Client\n"
        "client = Client('http://127.0.0.1:9/api/v1/developer', 'tw_live_' + 'x' * 43)\n"  # nothing listens on port 9
        "stream = client.stream(langs=['en-US'], start_after=1, backoff_base=0.1, backoff_cap=0.2)\n"
        "stream.__enter__()\n"
        "time.sleep(1.0)\n"
        "client.close()\n"
        "print('ended' if next(stream, None) is None else 'an item')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(README.parent / "src"))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ended", done.stderr[-2000:]
    assert "Task was destroyed but it is pending" not in done.stderr
