"""The mixed-fault run's clients, each recording into the :class:`History` what it did and saw:

- :class:`PostWriter`: a librdkafka producer publishing new posts (some partial, completed with
  more locales 5 to 20 s later; some backdated by up to a day);
- :class:`TransactionalWriter`: an aiokafka transactional producer, committing, and now and
  then aborting a transaction whose posts must never appear;
- :class:`Follower`: a stream client with cursors that drops itself at random and resumes;
- :class:`Walker`: follows ``GET /changes`` from the head it saw at the start;

  both record a refusal of a cursor the service handed them (``CURSOR_NOT_ISSUED``: the stream's
  ``ready`` with ``resumed: false``, a 422 of ``/changes``) as a :class:`~tests.chaos.history.Refusal`
  and come back with the same cursor after a pause, so what such a refusal costs is counted
  apart from what is lost (the service suggests filling the gap with ``GET /posts`` instead,
  which misses late translations: that would blur the two counts);
- :class:`Reader`: reads with ``X-Min-Log-Position`` (its last ``X-Log-Position``, or the
  position of a post a follower was pushed) and checks the answer is at least that fresh;
- :class:`Capped` (the production shape): six stream clients of a workspace limited to five
  connections, each recording its connections' spans;
- :class:`Spender` (the production shape): requests of a workspace limited to 60 a minute at
  three a second, each recorded with its status;
- :class:`Hooks`: webhook receivers (tests/support/receivers.py) that fail at random (the
  ``flaky`` plan, seeded from the run's seed), one per endpoint of :data:`ENDPOINTS`, registered
  before the writers start, each request recorded as it arrives.

Each client retries what failed after a short pause, as a partner would, and records the
failure (an error or a timeout) as an operation that was not served.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from datetime import datetime, timedelta, timezone

import aiohttp
import orjson

from tests.chaos.harness import CAPPED_WORKSPACE, LOCALES, RATED_WORKSPACE, TICKERS, Cluster, webhook_secret
from tests.chaos.history import Delivery, History, Key
from tests.support.events import post_ev, webhook_endpoint_ev
from tests.support.producers import Raw, librdkafka
from tests.support.receivers import Receiver, flaky, start_cursor
from tests.support.stack import BASE, auth
from tickerwire.schemas.models import PostEvent, encode_event, entity_key, topic_for_event_type
from tickerwire.services.cli.publish import send_events
from tickerwire.services.common import kafka
from tickerwire.services.readmodel.logposition import LogPosition, covers

#: Posts of each writer come from their own range, so the checker knows who wrote what.
PLAIN_IDS = 1_000_000
COMMITTED_IDS = 2_000_000
ABORTED_IDS = 3_000_000
#: A request slower than this counts as a timeout (not served).
REQUEST_TIMEOUT_S = 3.0
#: A stream silent for this long (the server pings every second) is taken as stalled.
STREAM_SILENCE_S = 5.0
RETRY_S = 0.3
#: How long a client waits before it comes back with a cursor the service refused.
REFUSED_RETRY_S = 1.0
#: The code of a refused cursor the service says it never issued (services/readmodel/cursors.py).
NOT_ISSUED = "CURSOR_NOT_ISSUED"


class Refused(ValueError):
    """The service refused a cursor it had issued (recorded; the client comes back with it)."""


SENTIMENTS = ("BULLISH", "NEUTRAL", "BEARISH")


def post(
    rng: random.Random, post_id: int, version: int, langs: list[str], *, status: str = "published", age_s: float = 0.0
) -> PostEvent:
    """A post with a sentiment and tickers of its own (a new version may change them: the
    counters must move the post from one to the other)."""
    now = datetime.now(timezone.utc)
    return post_ev(
        post_id,
        version,
        status=status,
        langs=langs,
        at=now - timedelta(seconds=age_s + 1),
        emitted_at=now,
        sentiment=rng.choice(SENTIMENTS),
        tickers=rng.sample(TICKERS, rng.randint(1, len(TICKERS))),
    )


class PostWriter:
    """New posts at ``rate`` per second through librdkafka; partial ones gain locales later."""

    def __init__(self, cluster: Cluster, history: History, rng: random.Random, rate: float) -> None:
        self.cluster, self.history, self.rng, self.rate = cluster, history, rng, rate
        self.topic = topic_for_event_type(cluster.stack.topic_prefix, "post")
        self.next_id = PLAIN_IDS
        #: (when due, post id, version, locales it will have): partial posts to complete.
        self.due: list[tuple[float, int, int, list[str]]] = []

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            events = [self._new() for _ in range(max(1, round(self.rate / 2)))]
            now = self.history.now()
            for item in [d for d in self.due if d[0] <= now]:
                self.due.remove(item)
                _, post_id, version, langs = item
                events.append(post(self.rng, post_id, version, langs))
            await self.send(events)
            await asyncio.sleep(0.5)
        for _, post_id, version, langs in self.due:  # the run ends: complete what is still partial
            await self.send([post(self.rng, post_id, version, langs)])
        self.due.clear()

    def _new(self) -> PostEvent:
        post_id, self.next_id = self.next_id, self.next_id + 1
        kind = self.rng.random()
        if kind < 0.25:  # partial: one locale now, more 5 to 20 s later
            later = ["en-US", *self.rng.sample(LOCALES[1:], self.rng.randint(1, 2))]
            self.due.append((self.history.now() + self.rng.uniform(5, 20), post_id, 2, later))
            return post(self.rng, post_id, 1, ["en-US"], status="partial")
        langs = self.rng.sample(LOCALES, self.rng.randint(1, 3))
        return post(self.rng, post_id, 1, langs, age_s=self.rng.uniform(60, 86_400) if kind < 0.45 else 0.0)

    async def send(self, events: list[PostEvent]) -> None:
        records = [Raw(encode_event(e), entity_key(e).encode()) for e in events]
        while True:
            start = self.history.now()
            try:
                await librdkafka(
                    self.cluster.kafka.bootstrap_servers, self.topic, records, **{"enable.idempotence": True}
                )
            except Exception as exc:  # the broker restarting: the same records again (a replay is harmless)
                self.history.op("publish librdkafka", start, False, type(exc).__name__)
                await asyncio.sleep(RETRY_S)
                continue
            self.history.op("publish librdkafka", start, True)
            self.history.acknowledged_posts(events)
            return


class TransactionalWriter:
    """Two posts per transaction every ~3 s; about one transaction in five is aborted."""

    def __init__(self, cluster: Cluster, history: History, rng: random.Random) -> None:
        self.cluster, self.history, self.rng = cluster, history, rng
        self.committed, self.aborted = COMMITTED_IDS, ABORTED_IDS

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.rng.random() < 0.2:
                ids = [self.aborted, self.aborted + 1]
                self.aborted += 2
                self.history.aborted.update(ids)
                await self.transaction(ids, commit=False)
            else:
                ids = [self.committed, self.committed + 1]
                self.committed += 2
                await self.transaction(ids, commit=True)
            await asyncio.sleep(self.rng.uniform(2, 4))

    async def transaction(self, ids: list[int], commit: bool) -> None:
        events = [post(self.rng, i, 1, self.rng.sample(LOCALES, self.rng.randint(1, 2))) for i in ids]
        config = self.cluster.stack.config
        while True:
            start = self.history.now()
            try:
                async with asyncio.timeout(30):
                    async with kafka.started_producer(config, transactional_id="chaos-tx") as producer:
                        await producer.begin_transaction()
                        await send_events(producer, config.topic_prefix, events)
                        await (producer.commit_transaction() if commit else producer.abort_transaction())
            except Exception as exc:  # a new producer with the same id aborts what was left open
                self.history.op("publish transaction", start, False, type(exc).__name__)
                if not commit:
                    return  # never committed: the posts stay forbidden
                await asyncio.sleep(RETRY_S)
                continue
            self.history.op("publish transaction", start, True)
            if commit:
                self.history.acknowledged_posts(events)
            return


class Follower:
    """A stream client with cursors: processes ``post.created`` one at a time, keeps the cursor
    of the last, drops the connection itself every 2 to 20 s and resumes with that cursor."""

    def __init__(
        self, name: str, cluster: Cluster, history: History, rng: random.Random, pushed: asyncio.Queue
    ) -> None:
        self.name, self.cluster, self.history, self.rng, self.pushed = name, cluster, history, rng, pushed
        self.cursor: str | None = None
        self.drops = 0
        #: Connections opened so far (each delivery names the one it came on).
        self.connections = 0
        #: Whether the current connection was accepted (a failure after that is dated when it happens).
        self.live = False

    async def run(self, stop: asyncio.Event, http: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            start = self.history.now()
            try:
                await self.session(http, stop)
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                self.history.op("stream", self.history.now() if self.live else start, False, type(exc).__name__)
                await asyncio.sleep(RETRY_S)

    async def session(self, http: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        query = f"resume={self.cursor}" if self.cursor else "cursors=true"
        url = f"{self.cluster.stream_url}{BASE}/stream?key={self.cluster.key}&{query}"
        start, self.live = self.history.now(), False
        self.connections += 1
        async with http.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=2), autoping=True) as ws:
            ready = orjson.loads((await ws.receive(timeout=REQUEST_TIMEOUT_S)).data)
            if ready.get("type") != "ready":
                raise ValueError(f"first message {ready}")
            if self.cursor is not None and ready.get("resumed") is not True:
                reason = ready.get("reason") or {}
                self.history.refused(self.name, self.cursor, str(reason.get("message", ready))[:300])
                if reason.get("code") == NOT_ISSUED:
                    await asyncio.sleep(REFUSED_RETRY_S)
                    raise Refused(reason.get("message", ""))
                self.history.violation(f"{self.name}: resume refused: {ready}")  # another epoch: start afresh
            self.cursor = ready["cursor"]
            self.history.op("stream", start, True)
            self.live = True
            until = self.history.now() + self.rng.uniform(2, 20)
            while not stop.is_set() and self.history.now() < until:
                msg = await ws.receive(timeout=STREAM_SILENCE_S)
                if msg.type != aiohttp.WSMsgType.TEXT:
                    raise aiohttp.ClientError(f"closed {ws.close_code}")
                body = orjson.loads(msg.data)
                if body["type"] != "post.created":
                    continue
                partition, _, offset = body["log_position"].partition(":")
                key: Key = (body["data"]["id"], body["data"]["lang"])
                self.history.deliveries[self.name].append(
                    Delivery(key, int(partition), int(offset), self.history.now(), self.connections)
                )
                self.cursor = body["cursor"]
                if self.pushed.full():
                    self.pushed.get_nowait()
                self.pushed.put_nowait((key, int(partition), int(offset)))
            self.drops += 1


class Walker:
    """Follows ``GET /changes`` page by page from the head it saw first, once a second."""

    def __init__(self, cluster: Cluster, history: History) -> None:
        self.cluster, self.history = cluster, history
        self.cursor: str | None = None

    async def run(self, stop: asyncio.Event, http: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            if not await self.page(http):
                await asyncio.sleep(1.0)

    async def page(self, http: aiohttp.ClientSession) -> bool:
        """One page; whether there is more right away."""
        start = self.history.now()
        params = {"limit": "50", **({"cursor": self.cursor} if self.cursor else {})}
        try:
            async with http.get(
                f"{self.cluster.api_url}{BASE}/changes",
                params=params,
                headers=auth(self.cluster.key),
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
            ) as resp:
                body = await resp.json()
                if resp.status != 200:
                    self.history.op("api /changes", start, False, str(resp.status))
                    if resp.status == 422 and self.cursor and (body.get("error") or {}).get("field") == "cursor":
                        self.history.refused("/changes walk", self.cursor, str(body["error"].get("message"))[:300])
                        await asyncio.sleep(REFUSED_RETRY_S)
                    return False
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            self.history.op("api /changes", start, False, type(exc).__name__)
            return False
        self.history.op("api /changes", start, True)
        self.history.walked += [(p["id"], p["lang"]) for p in body["posts"]]
        self.cursor = body["cursor"]
        return bool(body["has_more"])


class Reader:
    """Reads that demand freshness. ``follow_pushes``: ``GET /posts/{id}?lang=`` of a post a
    follower was pushed, demanding that post's position (it must be served, never a 404);
    otherwise ``GET /posts`` demanding the last ``X-Log-Position`` this reader saw (monotonic
    reads). Either way the answer's ``X-Log-Position`` is at least the one demanded."""

    def __init__(self, cluster: Cluster, history: History, pushed: asyncio.Queue | None) -> None:
        self.cluster, self.history, self.pushed = cluster, history, pushed
        self.mark = ""

    async def run(self, stop: asyncio.Event, http: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            if self.pushed is None:
                await self.read(http, "/posts", {"limit": "20"}, self.mark, None)
            else:
                key, partition, offset = await self.pushed.get()
                # A read has caught up with a push once its offset there is past the push's.
                await self.read(http, f"/posts/{key[0]}", {"lang": key[1]}, f"{partition}:{offset + 1}", key)
            await asyncio.sleep(0.3)

    async def read(self, http: aiohttp.ClientSession, path: str, params: dict, want: str, key: Key | None) -> None:
        endpoint = "api /posts/{id}" if key else "api /posts"
        start = self.history.now()
        headers = {**auth(self.cluster.key), **({"X-Min-Log-Position": want} if want else {})}
        try:
            async with http.get(
                f"{self.cluster.api_url}{BASE}{path}",
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
            ) as resp:
                await resp.read()
                status, mark = resp.status, resp.headers.get("X-Log-Position")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            self.history.op(endpoint, start, False, type(exc).__name__)
            return
        if status >= 500:
            self.history.op(endpoint, start, False, str(status))
            return
        self.history.op(endpoint, start, True, str(status))
        if status == 404 and key is not None:
            self.history.violation(f"stale read: {path}?lang={key[1]} 404 with X-Min-Log-Position {want} (mark {mark})")
        elif status != 200:
            self.history.violation(f"{path}: {status} with X-Min-Log-Position {want!r}")
        elif mark is None or not covers(LogPosition.parse(mark).marks(), LogPosition.parse(want).marks()):
            self.history.violation(f"stale read: {path} X-Log-Position {mark} below the demanded {want}")
        elif key is None:
            self.mark = mark


#: The webhook endpoints of the run, each with its locale filter (None: every locale).
ENDPOINTS: dict[str, tuple[str, ...] | None] = {"whe_chaosall": None, "whe_chaosde": ("de-DE",)}


class Hooks:
    """One flaky receiver per endpoint of :data:`ENDPOINTS` (the ``flaky`` plan seeded with the
    run's seed, and the next ones), each endpoint registered from the read model's frontier
    (as `tickerwire webhooks register` does) before any post is published, every request its
    receiver gets recorded into the history (:meth:`History.hook`)."""

    def __init__(self, cluster: Cluster, history: History, seed: int) -> None:
        self.cluster, self.history = cluster, history
        self.receivers = {
            endpoint_id: Receiver(
                webhook_secret(endpoint_id), flaky(seed + n), seen=functools.partial(history.hook, endpoint_id)
            )
            for n, endpoint_id in enumerate(ENDPOINTS)
        }

    async def start(self) -> None:
        """The receivers listening, their endpoints registered and projected."""
        for receiver in self.receivers.values():
            await receiver.start()
        stack = self.cluster.stack
        start, now = await start_cursor(stack), datetime.now(timezone.utc)
        await stack.publish(
            [
                webhook_endpoint_ev(
                    endpoint_id,
                    self.cluster.workspace_id,
                    1,
                    now=now,
                    url=self.receivers[endpoint_id].url,
                    locales=list(langs) if langs else None,
                    start_cursor=start,
                )
                for endpoint_id, langs in ENDPOINTS.items()
            ]
        )
        await stack.wait_projected()
        self.history.endpoints.update(ENDPOINTS)

    async def outage(self, endpoint_id: str, seconds: float) -> None:
        """The receiver of ``endpoint_id`` stops listening for ``seconds``, then comes back."""
        receiver = self.receivers[endpoint_id]
        await receiver.stop()
        try:
            await asyncio.sleep(seconds)
        finally:
            await receiver.start()

    async def stop(self) -> None:
        for receiver in self.receivers.values():
            await receiver.stop()


#: How many stream clients of the capped workspace try at once: one more than its limit.
CAPPED_CLIENTS = 6
#: How long a capped client holds a connection before it closes it itself.
CAPPED_HOLD_S = (2.0, 12.0)
#: How long a capped client waits after its connection was refused or dropped.
CAPPED_RETRY_S = 0.5
#: Requests a second the rated workspace's spender starts (three times its limit of 60 a minute).
SPEND_RATE = 3.0


class Capped:
    """One of :data:`CAPPED_CLIENTS` stream clients of the capped workspace (a limit of 5
    connections) against the shared stream port, so the kernel spreads them over the stream
    processes: each holds a connection for a while, closes it and connects again; refused
    (429), it tries again half a second later. Every connection's span, from its upgrade to
    the moment the client saw it end, goes into ``history.capped``."""

    def __init__(self, name: str, cluster: Cluster, history: History, rng: random.Random) -> None:
        self.name, self.cluster, self.history, self.rng = name, cluster, history, rng

    async def run(self, stop: asyncio.Event, http: aiohttp.ClientSession) -> None:
        key = self.cluster.limited_keys[CAPPED_WORKSPACE]
        while not stop.is_set():
            url = f"{self.cluster.stream_url}{BASE}/stream?key={key}"
            opened: float | None = None
            try:
                async with http.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=2)) as ws:
                    opened = self.history.now()
                    until = opened + self.rng.uniform(*CAPPED_HOLD_S)
                    while not stop.is_set() and self.history.now() < until:
                        msg = await ws.receive(timeout=max(0.05, until - self.history.now()))
                        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                            break
            except aiohttp.WSServerHandshakeError as exc:
                self.history.capped_refusals[exc.status] += 1
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
                pass
            finally:
                if opened is not None:
                    self.history.capped.append((opened, self.history.now(), self.name))
            await asyncio.sleep(CAPPED_RETRY_S)


class Spender:
    """``GET /posts`` with the rated workspace's key (a limit of 60 a minute) at
    :data:`SPEND_RATE` a second, open loop (each request on time whatever the earlier ones
    did), through the shared api port: each request's wall-clock span and status goes into
    ``history.spent``."""

    def __init__(self, cluster: Cluster, history: History) -> None:
        self.cluster, self.history = cluster, history

    async def run(self, stop: asyncio.Event, http: aiohttp.ClientSession) -> None:
        key = self.cluster.limited_keys[RATED_WORKSPACE]
        pending: set[asyncio.Task] = set()
        try:
            while not stop.is_set():
                task = asyncio.create_task(self.request(http, key))
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(1.0 / SPEND_RATE)
        finally:
            await asyncio.gather(*pending, return_exceptions=True)

    async def request(self, http: aiohttp.ClientSession, key: str) -> None:
        started = time.time()
        status = 0
        try:
            async with http.get(
                f"{self.cluster.api_url}{BASE}/posts",
                params={"limit": "1"},
                headers=auth(key),
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
            ) as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, OSError, TimeoutError):
            pass
        self.history.spent.append((started, time.time(), status))
