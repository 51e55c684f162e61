"""The client library's resuming stream against the real processes: every post exactly once
across a killed stream process and a restart of the application (resumed from the position it
saved), translations added later and backdated posts included; a refused cursor falls back to
the spec's gap-fill and says so."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
from datetime import timedelta

import pytest

from tests.support.events import T0, locale_ev, post_ev
from tests.support.stack import BASE, ServiceStack, started_stack
from tickerwire.services.readmodel import cursors
from tickerwire_client import AsyncClient, Client, ResumedPost, ResumePoint, ResumingStream

pytestmark = pytest.mark.e2e

LOCALES = ("en-US", "de-DE", "fr-FR")
WAIT = 30.0


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    env = {"TICKERWIRE_STREAM_PING_INTERVAL_S": "1"}
    async with started_stack(pg_dsn, kafka_bootstrap, f"clientresume{os.getpid()}", **env) as s:
        await s.publish([locale_ev(code, default=code == "en-US", position=n) for n, code in enumerate(LOCALES)])
        await s.wait_projected()
        yield s


@pytest.fixture(scope="module")
async def key(stack: ServiceStack) -> str:
    key = await stack.provision(
        "ws_client_resume", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000, stream_connection_limit=100
    )
    await asyncio.sleep(1.0)  # the API reloads its locale list shortly after a change
    return key


def client(stack: ServiceStack, key: str) -> AsyncClient:
    return AsyncClient(
        stack.of("api")[0].url + BASE, key, stream_url=f"ws://127.0.0.1:{stack.of('stream')[0].port}{BASE}"
    )


class App:
    """An application that handles items one at a time and saves the position after each."""

    def __init__(self) -> None:
        self.got: collections.Counter[tuple[int, str]] = collections.Counter()
        self.saved: str | None = None
        self.items: list[ResumedPost] = []

    async def take(self, stream: ResumingStream, expected: set[tuple[int, str]], ids: range) -> None:
        async def run() -> None:
            while not expected <= set(self.got):
                item = await stream.__anext__()
                if item.post.id in ids:
                    self.got[(item.post.id, item.post.lang)] += 1
                    self.items.append(item)
                self.saved = item.position.to_json()

        await asyncio.wait_for(run(), WAIT)


async def test_every_post_once_across_a_killed_stream_process_and_an_application_restart(stack, key):
    ids = range(100, 200)
    app = App()
    async with client(stack, key) as api:
        stream = api.resuming_stream(langs=["en-US", "de-DE"])
        await stream.connect()
        await stack.publish([post_ev(100, 1, langs=["en-US"], at=T0)])
        await app.take(stream, {(100, "en-US")}, ids)
        await stack.publish([post_ev(101, 1, status="partial", langs=["en-US"], at=T0 + timedelta(hours=1))])
        await app.take(stream, {(101, "en-US")}, ids)
        # The stream process dies; meanwhile the partial post gains its German translation and
        # a backdated post appears (both sort behind post 101 for GET /posts?after=101).
        stack.stop(stack.of("stream")[0], signal.SIGKILL)
        await stack.publish(
            [
                post_ev(101, 2, langs=["en-US", "de-DE", "fr-FR"], at=T0 + timedelta(hours=1)),
                post_ev(102, 1, langs=["de-DE"], at=T0 - timedelta(days=1)),
            ]
        )
        await stack.wait_projected()
        await stack.start("stream")
        api.stream_url = f"ws://127.0.0.1:{stack.of('stream')[0].port}{BASE}"  # the new process listens elsewhere
        await app.take(stream, {(101, "de-DE"), (102, "de-DE")}, ids)
        assert stream.stats.resumed >= 1 and stream.stats.refused == 0
        await stream.close()
    # The application restarts from what it saved.
    await stack.publish(
        [post_ev(103, 1, langs=["en-US", "de-DE"], at=T0), post_ev(101, 3, langs=["en-US", "de-DE", "fr-FR"])]
    )
    await stack.wait_projected()
    async with client(stack, key) as api:
        stream = api.resuming_stream(langs=["en-US", "de-DE"], resume_from=ResumePoint.from_json(app.saved or ""))
        await app.take(stream, {(103, "en-US"), (103, "de-DE")}, ids)
        await stack.publish([post_ev(104, 1, langs=["en-US"], at=T0)])
        await app.take(stream, {(104, "en-US")}, ids)
        await stream.close()
    assert set(app.got.values()) == {1}, app.got
    assert set(app.got) == {
        (100, "en-US"),
        (101, "en-US"),
        (101, "de-DE"),
        (102, "de-DE"),
        (103, "en-US"),
        (103, "de-DE"),
        (104, "en-US"),
    }
    assert {item.source for item in app.items} == {"stream"}


def another_epoch(cursor: cursors.Cursor) -> str:
    """As after a reset log."""
    return cursors.Cursor("0ther", cursor.marks).encode()


def past_the_log_end(cursor: cursors.Cursor) -> str:
    """Hand-edited: never issued by the service."""
    return cursors.Cursor(cursor.epoch, {p: (o + 1_000, lang) for p, (o, lang) in cursor.marks.items()}).encode()


def damaged(cursor: cursors.Cursor) -> str:
    """Cut short where it was kept: not a cursor at all (the handshake's 422 on ``resume``)."""
    return cursor.encode()[:3]


@pytest.mark.parametrize(
    ("stale_of", "code", "first"),
    [
        (another_epoch, cursors.EPOCH_CHANGED, 200),
        (past_the_log_end, cursors.NOT_ISSUED, 700),
        (damaged, "VALIDATION_FAILED", 800),
    ],
)
async def test_a_refused_cursor_falls_back_to_the_gap_fill_and_says_so(stack, key, stale_of, code, first, caplog):
    ids = range(first, first + 100)
    app = App()
    refusals: list[str] = []
    async with client(stack, key) as api:
        stream = api.resuming_stream(langs=["en-US"])
        await stream.connect()
        await stack.publish([post_ev(first, 1, langs=["en-US"], at=T0 + timedelta(days=2))])
        await app.take(stream, {(first, "en-US")}, ids)
        await stream.close()
        saved = ResumePoint.from_json(app.saved or "")
        await stack.publish([post_ev(first + 1, 1, langs=["en-US"], at=T0 + timedelta(days=3))])
        await stack.wait_projected()
        # The last id still anchors the gap-fill.
        stale = ResumePoint(stale_of(cursors.decode(saved.cursor or "")), saved.after)
        stream = api.resuming_stream(
            langs=["en-US"], resume_from=stale, on_refused=lambda code, _: refusals.append(code)
        )
        await app.take(stream, {(first + 1, "en-US")}, ids)
        await stack.publish([post_ev(first + 2, 1, langs=["en-US"], at=T0 + timedelta(days=3))])
        await app.take(stream, {(first + 2, "en-US")}, ids)
        await stream.close()
    assert refusals == [code] and stream.stats.refused == 1
    assert [(i.post.id, i.source) for i in app.items] == [
        (first, "stream"),
        (first + 1, "gap_fill"),
        (first + 2, "stream"),
    ]
    assert stream.position.cursor != stale.cursor and cursors.decode(stream.position.cursor or "").epoch != "0ther"
    assert any(
        r.levelname == "WARNING" and "refused the resume cursor" in r.getMessage() and code in r.getMessage()
        for r in caplog.records
    )  # loudly


async def test_the_blocking_resuming_stream_resumes_too(stack, key):
    async with client(stack, key) as api:
        stream = api.resuming_stream(langs=["fr-FR"])
        await stream.connect()
        start = stream.position
        await stream.close()
    await stack.publish([post_ev(300, 1, langs=["fr-FR"], at=T0)])
    await stack.wait_projected()

    def run() -> tuple[int, str, str | None]:
        with Client(
            stack.of("api")[0].url + BASE, key, stream_url=f"ws://127.0.0.1:{stack.of('stream')[0].port}{BASE}"
        ) as sync:
            with sync.resuming_stream(langs=["fr-FR"], resume_from=start) as blocking:
                item = next(item for item in blocking if item.post.id == 300)
                return item.post.id, item.source, blocking.position.cursor

    post_id, source, cursor = await asyncio.to_thread(run)
    assert (post_id, source) == (300, "stream") and cursor != start.cursor
