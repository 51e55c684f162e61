"""Resume cursors over real processes (docs/resume.md): a projector, an API and a stream process
on PostgreSQL and the broker; real WebSocket and HTTP clients.

A client that keeps the cursor of the last message it processed and reconnects with it gets
every announcement it missed exactly once: a translation added to an older partial post, a
post with an older ``published_at``, across a SIGKILL of the stream process and a rebuild's
switch, over 200 random disconnects. ``GET /changes`` walked from a cursor returns exactly what
the stream pushed after it. Every test publishes its own post ids and checks only those.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import time
from datetime import datetime, timezone
from typing import Sequence

import aiohttp
import orjson
import pytest

from tests.support import events
from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tests.support.topics import recreate_topic
from tests.support.ws import accepted
from tickerwire.schemas.models import Locale, LocaleEvent, PostEvent
from tickerwire.services.projector.accept import accept_log
from tickerwire.services.projector.rebuild import rebuild
from tickerwire.services.readmodel import cursors

pytestmark = pytest.mark.e2e

LOCALES = ("en-US", "de-DE", "fr-FR")
WAIT = 30.0  # generous upper bound for anything to arrive (a failure, not a measurement)
NOW = datetime.now(timezone.utc)

#: (post id, lang): one announcement.
Key = tuple[int, str]


def locale_event(code: str, default: bool) -> LocaleEvent:
    return LocaleEvent(
        version=1,
        emitted_at=NOW,
        data=Locale(
            code=code,
            name=code,
            native_name=code,
            country_code=code[-2:],
            direction="ltr",
            active=True,
            web_channel=True,
            is_default=default,
        ),
    )


def post_event(post_id: int, version: int, langs: Sequence[str], **fields) -> PostEvent:
    """Version ``version`` of post ``post_id`` in ``langs``, published ``age_s`` before this module loaded."""
    return events.post_event(post_id, version, langs, now=NOW, **fields)


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    env = {"TICKERWIRE_STREAM_PING_INTERVAL_S": "1"}
    async with started_stack(
        pg_dsn, kafka_bootstrap, f"resume{os.getpid()}", services=("projector", "api", "stream"), **env
    ) as s:
        await s.publish([locale_event(code, code == "en-US") for code in LOCALES])
        await s.wait_projected()
        yield s


@pytest.fixture(scope="module")
async def key(stack: ServiceStack) -> str:
    key = await stack.provision(
        "ws_resume", stream_connection_limit=1000, rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000
    )
    async with aiohttp.ClientSession() as http:  # the API lists the locales (the /changes langs) once it refreshed
        for _ in range(100):
            async with http.get(f"{stack.of('api')[0].url}{BASE}/languages", headers=auth(key)) as resp:
                if len((await resp.json())["languages"]) == len(LOCALES):
                    break
            await asyncio.sleep(0.1)
    return key


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


class Follower:
    """A client of the stream that processes post.created one at a time, keeps the cursor of the
    last one it processed, and resumes with it after every disconnect."""

    def __init__(self, http: aiohttp.ClientSession, stack: ServiceStack, key: str, ids: range, query: str = "") -> None:
        self.http, self.stack, self.key, self.ids, self.query = http, stack, key, ids, query
        self.cursor: str | None = None
        self.first_cursor: str | None = None
        self.got: collections.Counter[Key] = collections.Counter()
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.ready: dict = {}

    async def connect(self) -> dict:
        url = f"{self.stack.of('stream')[0].url}{BASE}/stream?key={self.key}{self.query}"
        url += f"&resume={self.cursor}" if self.cursor else "&cursors=true"
        self.ws, self.ready = await accepted(self.http, url, autoping=True)
        if self.cursor is None:
            self.cursor = self.first_cursor = self.ready["cursor"]
        else:
            assert self.ready["resumed"] is True and self.ready["cursor"] == self.cursor, self.ready
        return self.ready

    async def connect_refused(self) -> dict:
        """Resume with a cursor the stream refuses: ``ready`` says so, and the connection goes on
        live from the cursor it gives, which the client keeps."""
        url = f"{self.stack.of('stream')[0].url}{BASE}/stream?key={self.key}{self.query}&resume={self.cursor}"
        self.ws, self.ready = await accepted(self.http, url, autoping=True)
        self.cursor = self.ready["cursor"]
        return self.ready

    async def disconnect(self) -> None:
        if self.ws is not None:
            await self.ws.close()
            self.ws = None

    async def read(self, n: int, timeout: float = WAIT) -> int:
        """Process up to ``n`` post.created (any post), waiting at most ``timeout`` for each; how many."""
        assert self.ws is not None
        done = 0
        while done < n:
            try:
                msg = await self.ws.receive(timeout=timeout)
            except asyncio.TimeoutError:
                return done
            assert msg.type == aiohttp.WSMsgType.TEXT, msg
            body = orjson.loads(msg.data)
            if body["type"] != "post.created":
                continue
            if body["data"]["id"] in self.ids:
                self.got[(body["data"]["id"], body["data"]["lang"])] += 1
            self.cursor = body["cursor"]
            done += 1
        return done

    async def until(self, expected: set[Key], timeout: float = WAIT) -> None:
        """Process messages until every announcement of ``expected`` was processed."""
        deadline = time.monotonic() + timeout
        while missing := len(expected - self.got.keys()):
            left = deadline - time.monotonic()
            assert left > 0, f"missing {sorted(expected - self.got.keys())[:10]}"
            await self.read(missing, timeout=left)  # at least that many messages are still to come

    def mine(self) -> collections.Counter[Key]:
        return collections.Counter({k: n for k, n in self.got.items() if k[0] in self.ids})


async def changes(
    http: aiohttp.ClientSession, stack: ServiceStack, key: str, cursor: str | None, **params: str
) -> tuple[int, dict]:
    query = {**({"cursor": cursor} if cursor is not None else {}), **params}
    async with http.get(f"{stack.of('api')[0].url}{BASE}/changes", params=query, headers=auth(key)) as resp:
        return resp.status, await resp.json()


async def walk(
    http: aiohttp.ClientSession, stack: ServiceStack, key: str, cursor: str, ids: range, **params: str
) -> list[Key]:
    """Every announcement of ``ids`` after ``cursor``, page by page, in the order served."""
    seen: list[Key] = []
    while True:
        status, body = await changes(http, stack, key, cursor, limit="7", **params)
        assert status == 200, body
        seen += [(p["id"], p["lang"]) for p in body["posts"] if p["id"] in ids]
        cursor = body["cursor"]
        if not body["has_more"]:
            return seen


# ---------------------------------------------------------------------------------------------- the opt-ins


async def test_without_the_opt_ins_ready_and_post_created_are_the_specs(stack, key, http):
    async with stack.publisher() as send:
        ws, ready = await accepted(http, f"{stack.of('stream')[0].url}{BASE}/stream?key={key}")
        try:
            assert set(ready) == {"type", "ts", "session_id"}
            await send([post_event(100, 1, ["en-US"])])
            while True:
                body = orjson.loads((await ws.receive(timeout=WAIT)).data)
                if body["type"] == "post.created" and body["data"]["id"] == 100:
                    break
            assert "cursor" not in body
        finally:
            await ws.close()


async def test_a_malformed_cursor_is_refused_with_its_field(stack, key, http):
    for bad in ("", "x", "c1~!!!", cursors.PREFIX + "e~0"):  # an empty resume= too: it asks for a resume
        status, body = await changes(http, stack, key, bad)
        assert status == 422 and body["error"]["code"] == "VALIDATION_FAILED" and body["error"]["field"] == "cursor", (
            body
        )
        async with http.get(f"{stack.of('stream')[0].url}{BASE}/stream", params={"key": key, "resume": bad}) as resp:
            body = await resp.json()
            assert resp.status == 422 and body["error"]["field"] == "resume", body


async def test_changes_is_counted_like_any_request(stack, key, http):
    remaining = []
    for _ in range(2):
        async with http.get(f"{stack.of('api')[0].url}{BASE}/changes", headers=auth(key)) as resp:
            assert resp.status == 200
            remaining.append((int(resp.headers["X-RateLimit-Remaining"]), int(resp.headers["X-Quota-Remaining"])))
    assert remaining[1] == (remaining[0][0] - 1, remaining[0][1] - 1)


async def test_a_cursor_of_another_epoch_is_refused_plainly(stack, key, http):
    status, head = await changes(http, stack, key, None)
    assert status == 200 and head["posts"] == [] and head["has_more"] is False
    other = cursors.Cursor("0ther0epoch", cursors.decode(head["cursor"]).marks).encode()
    status, body = await changes(http, stack, key, other)
    assert status == 409 and body["error"] == {
        "code": cursors.EPOCH_CHANGED,
        "message": cursors.EPOCH_CHANGED_MESSAGE,
        "field": "cursor",
    }, body
    ws, ready = await accepted(http, f"{stack.of('stream')[0].url}{BASE}/stream?key={key}&resume={other}")
    await ws.close()
    assert ready["resumed"] is False and ready["reason"]["code"] == cursors.EPOCH_CHANGED
    assert cursors.decode(ready["cursor"]).epoch == cursors.decode(head["cursor"]).epoch  # where it goes on live


def forgeries(genuine: str) -> dict[str, str]:
    """Well-formed cursors of the current epoch that the service never wrote, made from a
    genuine cursor at the committed frontier."""
    cursor = cursors.decode(genuine)
    p, (offset, _) = max(cursor.marks.items(), key=lambda item: item[1])  # the furthest partition
    unknown = next(str(d) for d in range(10) if d not in cursor.marks)
    segment = f"~{p}.{offset}"
    assert segment in genuine and str(offset)[0] < "9" and p < 10, genuine
    return {
        "past the log end": cursors.Cursor(cursor.epoch, {**cursor.marks, p: (offset + 1000, "")}).encode(),
        "an unknown partition": cursors.Cursor(cursor.epoch, {**cursor.marks, 999: (1, "")}).encode(),
        # one byte changed, still well-formed: the first digit of an offset, the digit of a partition
        "an offset's digit changed": genuine.replace(segment, f"~{p}.9{str(offset)[1:]}"),
        "a partition's digit changed": genuine.replace(segment, f"~{unknown}.{offset}"),
    }


async def test_a_cursor_this_service_never_wrote_is_refused_and_never_obeyed(stack, key, http):
    await stack.publish([post_event(i, 1, ["en-US"]) for i in range(180, 190)])  # offsets on every partition
    await stack.wait_projected()
    status, head = await changes(http, stack, key, None)
    assert status == 200 and head["has_more"] is False
    forged = forgeries(head["cursor"])
    assert head["cursor"] not in forged.values() and len(set(forged.values())) == len(forged)
    followers = []
    try:
        for what, token in forged.items():
            status, body = await changes(http, stack, key, token)
            assert status == 422 and body["error"]["code"] == "VALIDATION_FAILED", (what, body)
            assert body["error"]["field"] == "cursor" and "not issued" in body["error"]["message"], (what, body)
            follower = Follower(http, stack, key, range(190, 200))
            follower.cursor = token
            followers.append(follower)
            ready = await follower.connect_refused()
            assert ready["resumed"] is False and ready["reason"]["code"] == "CURSOR_NOT_ISSUED", (what, ready)
            assert cursors.decode(ready["cursor"]).epoch == cursors.decode(head["cursor"]).epoch
        # Refused, each goes on live from a genuine cursor: the next post arrives at once (an
        # obeyed cursor past the log end would hold it back), and that cursor is accepted.
        await stack.publish([post_event(190, 1, ["en-US"])])
        for follower in followers:
            await follower.until({(190, "en-US")})
            assert follower.mine() == {(190, "en-US"): 1}
            status, body = await changes(http, stack, key, follower.cursor)
            assert status == 200, body
            await follower.disconnect()
            await follower.connect()  # resumes plainly
    finally:
        for follower in followers:
            await follower.disconnect()


# ---------------------------------------------------------------------------------------------- what a reconnect used to miss


async def test_a_translation_added_to_an_older_post_and_a_backdated_post_are_resumed_exactly_once(stack, key, http):
    ids = range(200, 210)
    follower = Follower(http, stack, key, ids)
    async with stack.publisher() as send:
        await follower.connect()
        await send([post_event(200, 1, ["en-US"], status="partial", age_s=60), post_event(201, 1, ["en-US"])])
        await follower.until({(200, "en-US"), (201, "en-US")})
        before = follower.cursor
        await follower.disconnect()
        # While disconnected: the older partial post gains its translations, and a post published
        # an hour ago appears. Both sort behind post 201 for GET /posts?after=201.
        await send(
            [
                post_event(200, 2, ["en-US", "de-DE", "fr-FR"], status="published", age_s=60),
                post_event(202, 1, ["en-US", "de-DE"], age_s=3600),
            ]
        )
        await stack.wait_projected()
        await follower.connect()
        missed = {(200, "de-DE"), (200, "fr-FR"), (202, "en-US"), (202, "de-DE")}
        await follower.until(missed)
        await send([post_event(203, 1, ["en-US"])])  # live after the replay
        await follower.until({(203, "en-US")})
        await follower.read(100, timeout=0.5)
        await follower.disconnect()
    assert follower.mine() == collections.Counter(
        {(200, "en-US"): 1, (201, "en-US"): 1, (203, "en-US"): 1} | dict.fromkeys(missed, 1)
    )
    assert sorted(await walk(http, stack, key, before, ids)) == sorted(missed | {(203, "en-US")})


async def test_a_resume_keeps_the_connections_filters(stack, key, http):
    ids = range(300, 310)
    follower = Follower(http, stack, key, ids, query="&lang=de-de&tickers=eth")
    async with stack.publisher() as send:
        await follower.connect()
        await follower.disconnect()
        await send(
            [
                post_event(300, 1, ["en-US", "de-DE"], tickers=["ETH"]),
                post_event(301, 1, ["de-DE"], tickers=["BTC"]),
                post_event(302, 1, ["fr-FR", "de-DE"], tickers=["ETH", "SOL"]),
            ]
        )
        await stack.wait_projected()
        await follower.connect()
        await follower.until({(300, "de-DE"), (302, "de-DE")})
        await follower.read(100, timeout=0.5)
        await follower.disconnect()
    assert follower.mine() == collections.Counter({(300, "de-DE"): 1, (302, "de-DE"): 1})
    assert sorted(await walk(http, stack, key, follower.first_cursor, ids, lang="de-DE", tickers="ETH")) == [
        (300, "de-DE"),
        (302, "de-DE"),
    ]


async def test_a_replay_of_10000_announcements_completes_through_a_256_message_queue(stack, key, http, capsys):
    ids = range(10_000, 10_000 + 5_000)
    follower = Follower(http, stack, key, ids)
    await follower.connect()
    await follower.disconnect()
    await stack.publish([post_event(i, 1, ["en-US", "de-DE"]) for i in ids])
    await stack.wait_projected(timeout=120)
    started = time.monotonic()
    await follower.connect()
    await follower.until({(i, lang) for i in ids for lang in ("en-US", "de-DE")})
    took = time.monotonic() - started
    await follower.disconnect()
    assert set(follower.mine().values()) == {1}
    assert took < 10  # a bound for a loaded test machine; docs/benchmarks.md has the measured figure
    with capsys.disabled():
        print(
            f"\nreplay of {len(follower.mine()):,} announcements from the handshake to the last one read: {took:.2f} s"
        )


# ---------------------------------------------------------------------------------------------- process faults


async def test_a_sigkill_of_the_stream_process_is_resumed_exactly_once(stack, key, http):
    ids = range(400, 410)
    follower = Follower(http, stack, key, ids)
    async with stack.publisher() as send:
        await follower.connect()
        await send([post_event(400, 1, ["en-US"])])
        await follower.until({(400, "en-US")})
        old = stack.of("stream")[0]
        stack.stop(old, signal.SIGKILL)
        await send([post_event(401, 1, ["en-US", "fr-FR"]), post_event(400, 2, ["en-US", "de-DE"])])
        await stack.wait_projected()
        await stack.start("stream")
        await follower.disconnect()
        await follower.connect()
        await follower.until({(401, "en-US"), (401, "fr-FR"), (400, "de-DE")})
        await follower.read(100, timeout=0.5)
        await follower.disconnect()
    assert follower.mine() == collections.Counter(
        {(400, "en-US"): 1, (401, "en-US"): 1, (401, "fr-FR"): 1, (400, "de-DE"): 1}
    )


async def test_a_rebuilds_switch_is_resumed_exactly_once(stack, key, http):
    ids = range(500, 510)
    follower = Follower(http, stack, key, ids)
    async with stack.publisher() as send:
        await follower.connect()
        await send([post_event(500, 1, ["en-US"], status="partial")])
        await follower.until({(500, "en-US")})
        await follower.disconnect()
        await send([post_event(501, 1, ["en-US"])])
        await stack.wait_projected()
        epoch = cursors.decode(follower.cursor or "").epoch
        await rebuild(stack.config)
        await send([post_event(500, 2, ["en-US", "de-DE"]), post_event(502, 1, ["fr-FR"], age_s=600)])
        await stack.wait_projected()
        await follower.connect()
        await follower.until({(501, "en-US"), (500, "de-DE"), (502, "fr-FR")})
        await follower.read(100, timeout=0.5)
        await follower.disconnect()
    conn = await stack.read_conn()
    try:
        assert (await cursors.current_epoch(conn)).epoch == epoch  # the same log, replayed: the same positions
        indexes = {r["indexname"] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = 'rm'")}
        assert {
            "post_translations_announced",
            "post_translations_announced_order",
        } <= indexes  # the bulk load built them
    finally:
        await conn.close()
    assert follower.mine() == collections.Counter(
        {(500, "en-US"): 1, (501, "en-US"): 1, (500, "de-DE"): 1, (502, "fr-FR"): 1}
    )


# ---------------------------------------------------------------------------------------------- randomized


async def test_200_random_disconnects_miss_nothing_and_double_nothing(stack, key, http):
    """200 cycles: publish a few changes (new posts, some partial or backdated; translations added
    to older posts; edits that announce nothing), then read a random number of messages and drop
    the connection. Finally every visible translation was processed exactly once, and /changes
    from the first cursor serves exactly that set."""
    rng = random.Random(29)
    ids = range(1_000, 2_000)
    langs_of: dict[int, list[str]] = {}
    versions: dict[int, int] = {}
    next_id = ids.start
    follower = Follower(http, stack, key, ids)
    started = time.monotonic()
    async with stack.publisher() as send:
        for cycle in range(200):
            events = []
            for _ in range(rng.randint(0, 3)):
                grow = [p for p, langs in langs_of.items() if len(langs) < len(LOCALES)]
                kind = rng.random()
                if kind < 0.35 and grow:  # an older post gains a translation
                    post = rng.choice(grow)
                    langs_of[post].append(next(code for code in LOCALES if code not in langs_of[post]))
                elif kind < 0.5 and langs_of:  # an edit: nothing new to announce
                    post = rng.choice(list(langs_of))
                else:  # a new post, sometimes partial, sometimes backdated by up to a day
                    post, next_id = next_id, next_id + 1
                    langs_of[post] = rng.sample(LOCALES, rng.randint(1, 2))
                versions[post] = versions.get(post, 0) + 1
                partial = len(langs_of[post]) < len(LOCALES)
                events.append(
                    post_event(
                        post,
                        versions[post],
                        langs_of[post],
                        status="partial" if partial else "published",
                        age_s=rng.choice([0, 0, 30, 86_400 * rng.random()]),
                    )
                )
            if events:
                await send(events)
            await follower.connect()
            await follower.read(rng.randint(0, 6), timeout=rng.choice([0.01, 0.05, 0.2]))
            await follower.disconnect()
        expected = {(p, lang) for p, langs in langs_of.items() for lang in langs}
        await stack.wait_projected()
        await follower.connect()
        await follower.until(expected)
        await follower.read(1000, timeout=0.5)
        await follower.disconnect()
    mine = follower.mine()
    assert set(mine) == expected and set(mine.values()) == {1}, [k for k, n in mine.items() if n > 1][:10]
    assert len(expected) > 200
    walked = await walk(http, stack, key, follower.first_cursor or "", ids)
    assert len(walked) == len(set(walked)) and set(walked) == expected
    assert time.monotonic() - started < 120


# ---------------------------------------------------------------------------------------------- a reset log


async def test_a_reset_log_refuses_old_cursors_with_their_code_never_a_silent_gap(pg_dsn, kafka_bootstrap, http):
    env = {"TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S": "0.5", "TICKERWIRE_STREAM_PING_INTERVAL_S": "1"}
    prefix = f"resumereset{os.getpid()}"
    async with started_stack(pg_dsn, kafka_bootstrap, prefix, services=("projector", "api", "stream"), **env) as stack:
        await stack.publish([locale_event(code, code == "en-US") for code in LOCALES])
        key = await stack.provision(
            "ws_reset", stream_connection_limit=100, rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000
        )
        ids = range(1, 100)
        follower = Follower(http, stack, key, ids)
        await follower.connect()
        await stack.publish(
            [post_event(i, 1, ["en-US"]) for i in range(1, 41)]
        )  # every partition well past what comes next
        await follower.until({(i, "en-US") for i in range(1, 41)})
        await follower.disconnect()
        old = follower.cursor
        # The posts topic is deleted and created again: a new, empty log.
        await recreate_topic(stack.config, f"{prefix}.posts.v1")
        stack.marks.clear()
        await stack.publish([post_event(50, 1, ["en-US"])])
        await asyncio.sleep(1.5)  # the projector sees the discontinuity and stops
        accepted_log = await accept_log(stack.config, "earliest")
        assert accepted_log.moved and not accepted_log.left
        await stack.wait_projected()
        status, body = await changes(http, stack, key, old)
        assert (
            status == 409 and body["error"]["code"] == cursors.EPOCH_CHANGED and body["error"]["field"] == "cursor"
        ), body
        ready = await follower.connect_refused()
        assert ready["resumed"] is False and ready["reason"]["code"] == cursors.EPOCH_CHANGED
        assert cursors.decode(ready["cursor"]).epoch != cursors.decode(old or "").epoch
        # From the new epoch on, resuming works again, with nothing of the old log in it.
        await stack.publish([post_event(51, 1, ["en-US", "de-DE"])])
        await follower.until({(51, "en-US"), (51, "de-DE")})
        await follower.disconnect()
        await stack.publish([post_event(52, 1, ["fr-FR"])])
        await stack.wait_projected()
        await follower.connect()
        await follower.until({(52, "fr-FR")})
        await follower.read(100, timeout=0.5)
        await follower.disconnect()
        # Post 50, published to the new log before accept-log, is announced in the new epoch too.
        new = {(50, "en-US"), (51, "en-US"), (51, "de-DE"), (52, "fr-FR")}
        assert walked_after(await walk(http, stack, key, ready["cursor"], ids)) == new
    mine = follower.mine()
    assert set(mine.values()) == {1} and set(mine) == {(i, "en-US") for i in range(1, 41)} | new


def walked_after(walked: list[Key]) -> set[Key]:
    assert len(walked) == len(set(walked))
    return set(walked)


# ---------------------------------------------------------------------------------------------- one walk


#: Random cases of the property below (each a stream resume and a /changes walk).
WALK_CASES = 30


async def replayed(
    http: aiohttp.ClientSession, stack: ServiceStack, key: str, cursor: str, ids: range, query: str
) -> list[Key]:
    """What a stream resumed from ``cursor`` with the filters of ``query`` pushes (of ``ids``),
    in order, until it is quiet for half a second."""
    url = f"{stack.of('stream')[0].url}{BASE}/stream?key={key}&resume={cursor}{query}"
    ws, ready = await accepted(http, url, autoping=True)
    got: list[Key] = []
    try:
        assert ready["resumed"] is True, ready
        while True:
            try:
                msg = await ws.receive(timeout=0.5)
            except asyncio.TimeoutError:
                return got
            body = orjson.loads(msg.data)
            if body["type"] == "post.created" and body["data"]["id"] in ids:
                got.append((body["data"]["id"], body["data"]["lang"]))
    finally:
        await ws.close()


async def test_changes_and_a_resumed_stream_walk_the_same_announcements_from_any_issued_cursor(stack, key, http):
    """Property (seeded random cases): from any cursor the service issued, through any locale and
    ticker filter, ``GET /changes`` walked page by page (any page size) and a stream resumed with
    that cursor give the same announcements in the same order: both map one walk
    (services/readmodel/walk.py) onto their transport."""
    ids = range(700, 760)
    rng = random.Random(4401)
    follower = Follower(http, stack, key, ids)
    issued: list[str] = []
    async with stack.publisher() as send:
        await follower.connect()
        issued.append(follower.cursor or "")
        for post_id in ids:  # posts in random locales and tickers; some gain a locale later
            langs = rng.sample(LOCALES, rng.randint(1, 3))
            tickers = rng.sample(["BTC", "ETH", "SOL"], rng.randint(1, 2))
            await send([post_event(post_id, 1, langs, tickers=tickers)])
            if len(langs) < 3 and rng.random() < 0.3:
                await send(
                    [
                        post_event(
                            post_id, 2, [*langs, next(lang for lang in LOCALES if lang not in langs)], tickers=tickers
                        )
                    ]
                )
        await stack.wait_projected()
        while await follower.read(1, timeout=1.0):
            issued.append(follower.cursor or "")
        await follower.disconnect()
    assert len(issued) > 60
    nonempty = 0
    for case in range(WALK_CASES):
        cursor = rng.choice(issued)
        filters: dict[str, str] = {}
        if rng.random() < 0.6:
            filters["lang"] = ",".join(rng.sample([*LOCALES, "xx-XX"], rng.randint(1, 2)))
        if rng.random() < 0.5:
            filters["tickers"] = ",".join(rng.sample(["BTC", "ETH", "SOL", "DOGE"], rng.randint(1, 2)))
        query = "".join(f"&{k}={v}" for k, v in filters.items())
        pushed = await replayed(http, stack, key, cursor, ids, query)
        walked = await walk(http, stack, key, cursor, ids, **filters)  # pages of 7
        assert pushed == walked, f"case {case}: cursor {cursor}, filters {filters}"
        nonempty += bool(pushed)
    assert nonempty >= WALK_CASES // 3  # the cases walk something
