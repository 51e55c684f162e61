"""Fault-injection scenarios over real processes, each recording what a partner saw.

Two set-ups:

- :class:`UpScenarios` runs one ``tickerwire up`` (embedded PostgreSQL and broker) and injects
  one fault after another: SIGKILL of each service child, SIGKILL of the embedded PostgreSQL
  (then a catalog change with the caches in use), SIGSTOP of PostgreSQL (10 s, and 15 s for
  the stream leases), SIGKILL of up's Apache Kafka (it comes back with its log).
- :func:`log_reset` runs the services one by one on their own embedded PostgreSQL and broker,
  replaces the broker by an empty one, and checks the projector refuses loudly, then recovers
  with ``tickerwire projector accept-log``.

Every scenario returns an :class:`Outcome`: the HTTP statuses a partner got, the stream close
codes, posts lost and doubled, the time to recover, and whether each criterion of issue 10
held. Nothing here asserts; the pytest module and the runner judge the outcomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import asyncpg

from tests.support.brokers import TEST_KAFKA_SETTINGS
from tests.support.faults import (
    Prober,
    StreamWatcher,
    UpRun,
    alive,
    ops_url,
    postgres_pids,
    readyz_url,
    signal_all,
    start_up,
    stop_up,
    up_ports,
    wait_up,
)
from tests.support.stack import BASE, ServiceStack, auth
from tickerwire.devstack.demo.dataset import LISTED_LOCALES
from tickerwire.devstack.demo.trickle import next_post
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.ports import free_port
from tickerwire.devstack.embedded.postgres import EmbeddedPostgres
from tickerwire.schemas.models import Token, TokenEvent
from tickerwire.services.common.kafka import ensure_topics


@dataclass
class Outcome:
    scenario: str
    fault: str
    http: str = ""
    stream: str = ""
    lost: int | None = None
    doubled: int | None = None
    recover_s: float | None = None
    criteria: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(self.criteria.values())


#: How client-side failures are named in the table.
NO_ANSWER = {"ClientConnectorError": "refused", "ServerDisconnectedError": "disconnected", "TimeoutError": "timeout"}


def fmt_statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{NO_ANSWER.get(k, k)}×{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


class Posts:
    """Probe posts with ids of our own, and whether the read model shows them."""

    def __init__(self, stack: ServiceStack, first_id: int) -> None:
        self.stack = stack
        self.next_id = first_id
        self.rng = random.Random(first_id)
        self.published: set[int] = set()

    async def publish(self, n: int = 1, *, retry_for_s: float = 0.0) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        events = [
            next_post(self.rng, post_id=i, now=datetime.now(timezone.utc), locales=LISTED_LOCALES[:2]) for i in ids
        ]
        deadline = time.monotonic() + retry_for_s
        while True:
            try:
                await asyncio.wait_for(self.stack.publish(events), 20)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        self.published.update(ids)
        return ids

    async def visible(self, ids) -> set[int]:
        conn = await asyncpg.connect(self.stack.database_url, timeout=5)
        try:
            rows = await conn.fetch(
                "SELECT DISTINCT post_id FROM rm.post_translations WHERE post_id = ANY($1::bigint[]) AND visible",
                list(ids),
            )
        finally:
            await conn.close()
        return {r["post_id"] for r in rows}

    async def wait_visible(self, ids, timeout: float) -> float | None:
        """Seconds until every post of ``ids`` is visible, or None."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            try:
                if await self.visible(ids) >= set(ids):
                    return time.monotonic() - started
            except (OSError, asyncpg.PostgresError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.2)
        return None


async def wait_for(predicate, timeout: float, every: float = 0.2) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await predicate():
            return time.monotonic() - started
        await asyncio.sleep(every)
    return None


async def get_json(url: str, headers: dict | None = None, timeout: float = 5.0) -> tuple[int | str, dict | None, float]:
    started = time.monotonic()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
            async with s.get(url, headers=headers or {}) as resp:
                body = await resp.json(content_type=None) if resp.content_type == "application/json" else None
                return resp.status, body, time.monotonic() - started
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        return type(exc).__name__, None, time.monotonic() - started


class UpScenarios:
    """One ``tickerwire up`` and the faults injected into it, in order."""

    def __init__(self) -> None:
        self.state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-faults-"))
        self.ports = up_ports()
        self.run: UpRun | None = None
        self.outcomes: list[Outcome] = []

    async def __aenter__(self) -> "UpScenarios":
        self.run = start_up(self.state_dir, self.ports)
        await asyncio.get_running_loop().run_in_executor(None, wait_up, self.run)
        self._reader = asyncio.create_task(self.run.read_output())
        info = self.run.info
        self.stack = ServiceStack(info["database_url"], info["kafka_bootstrap_servers"], info["topic_prefix"])
        self.key = await self.stack.provision("ws_faults", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        self.posts = Posts(self.stack, 7_000_000)
        self.base = info["base_url"]
        self.metrics = info["metrics"]
        self.stream_url = f"ws://{self.base.split('://', 1)[1].split('/', 1)[0].rsplit(':', 1)[0]}:{self.ports['stream_port']}{BASE}/stream?key={self.key}"
        await asyncio.sleep(1.0)  # the API's catalog and the stream's feed see the new workspace
        return self

    async def __aexit__(self, *exc) -> None:
        if self.run is not None:
            await asyncio.get_running_loop().run_in_executor(None, stop_up, self.run)
        self._reader.cancel()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def up_alive(self) -> bool:
        return self.run is not None and self.run.proc.poll() is None

    def posts_url(self) -> str:
        return f"{self.base}/posts?limit=1"

    async def _settle(self) -> None:
        """Between scenarios: every readiness says ready again (bounded)."""

        async def all_ready():
            codes = [
                (await get_json(readyz_url(self.metrics[n]), timeout=2))[0] for n in ("api", "stream", "projector")
            ]
            return all(c == 200 for c in codes)

        await wait_for(all_ready, 60, every=0.5)

    # ------------------------------------------------------------------ SIGKILL of a child

    async def kill_child(self, name: str) -> Outcome:
        await self._settle()
        out = Outcome(f"up: SIGKILL {name}", f"SIGKILL of the {name} child of `tickerwire up`")
        old = self.run.children()[name]
        async with Prober(self.posts_url(), auth(self.key)) as http, StreamWatcher(self.stream_url) as ws:
            await asyncio.wait_for(ws.connected.wait(), 30)
            before = await self.posts.publish(5)
            await asyncio.sleep(1.0)
            t = http.now()
            os.kill(old, signal.SIGKILL)
            during = await self.posts.publish(5)
            restarted = await wait_for(lambda: self._restarted(name, old), 30)
            if name == "api":  # until the partner is served again (bounded), so the prober sees it
                await wait_for(lambda: _ok_status(self.posts_url(), auth(self.key)), 30)
            if name == "stream":
                await wait_for(lambda: _true(ws.connected.is_set()), 30)
            after = await self.posts.publish(5)
            visible_in = await self.posts.wait_visible(before + during + after, 60)
            if visible_in is not None:
                visible_in = http.now() - t  # from the kill
            await asyncio.sleep(2.0)
            out.recover_s = {
                "api": http.first_ok_after(t),
                "projector": visible_in,
                "stream": self._stream_recovery(ws, t),
            }[name]
            out.http = fmt_statuses(http.statuses(t))
            out.stream = _closes(ws)
            ids = set(before + during + after)
            out.lost = len(ids - await self.posts.visible(ids))
            out.doubled = ws.doubled(ids)
        out.criteria = {
            "up still running": self.up_alive(),
            "child restarted": restarted is not None,
        }
        if name == "projector":
            # Reads never needed the projector; what a partner waits for is fresh posts.
            out.criteria["reads served throughout"] = set(http.statuses(t)) == {"200"}
            out.criteria["new posts visible again within 30 s"] = out.recover_s is not None and out.recover_s <= 30
            out.notes.append(
                f"posts published around the kill all visible {_s(visible_in)} after the kill "
                "(restart, then the consumer group's rebalance: the killed member's session must expire first)"
            )
        else:
            out.criteria["partner served again within 10 s"] = out.recover_s is not None and out.recover_s <= 10
        out.criteria["0 lost"] = out.lost == 0
        out.criteria["0 doubled"] = out.doubled == 0
        out.notes.append(_restart_lines(self.run, name))
        self.outcomes.append(out)
        return out

    @staticmethod
    def _stream_recovery(ws: StreamWatcher, t_kill: float) -> float | None:
        # The watcher's clock starts with the prober's (both entered together). The last failed
        # attempt after the kill, plus the reconnect pause, bounds the time to reconnect.
        reconnects = [t for t, _ in ws.closes if t >= t_kill]
        if not ws.connected.is_set():
            return None
        return (max(reconnects) - t_kill + 0.5) if reconnects else None

    async def _restarted(self, name: str, old: int) -> bool:
        try:
            return self.run.children()[name] != old and alive(self.run.children()[name])
        except (OSError, ValueError, KeyError):
            return False

    # ------------------------------------------------------------------ PostgreSQL

    async def kill_postgres(self) -> Outcome:
        await self._settle()
        out = Outcome("up: SIGKILL PostgreSQL", "SIGKILL of the embedded PostgreSQL (postmaster)")
        async with Prober(self.posts_url(), auth(self.key)) as http:
            before = await self.posts.publish(5)
            await self.posts.wait_visible(before, 30)
            await asyncio.sleep(1.0)
            t = http.now()
            os.kill(self.run.postmaster_pid(), signal.SIGKILL)
            during = await self.posts.publish(5)
            back = await wait_for(lambda: _ok_status(self.posts_url(), auth(self.key)), 60)
            await asyncio.sleep(2.0)
            out.recover_s = http.first_ok_after(t)
            out.http = fmt_statuses(http.statuses(t))
            ids = set(before + during)
            await self.posts.wait_visible(ids, 60)
            out.lost = len(ids - await self.posts.visible(ids))
            bad = [s for s in http.since(t) if s.status not in (200, 503)]
        # A catalog change after the restart, with the API's caches in use.
        ticker = f"FLT{random.randrange(10**4)}"

        async def token_served():
            return (await get_json(f"{self.base}/tokens/{ticker}", auth(self.key)))[0] == 200

        await self.stack.publish([_token_event(ticker)])
        catalog_s = await wait_for(token_served, 30, every=0.1)
        out.notes.append(f"a token added after the restart was served in {_s(catalog_s)}")
        out.notes.append(_restart_lines(self.run, "PostgreSQL"))
        out.criteria = {
            "up still running": self.up_alive(),
            "PostgreSQL restarted": back is not None,
            "only 200 or JSON 503": not bad,
            "0 lost": out.lost == 0,
            "catalog change served within 5 s": catalog_s is not None and catalog_s <= 5,
        }
        self.outcomes.append(out)
        return out

    @contextlib.asynccontextmanager
    async def _watching(self, ready_names: tuple[str, ...]):
        """A partner reading (``http``) and streaming (``ws``) while the named services' /readyz
        are probed every 0.25 s, once three posts published first are visible; yields
        (http, ws, readies, those posts, t, t_ready), the times the fault starts from."""
        readies = {n: Prober(readyz_url(self.metrics[n]), every_s=0.25) for n in ready_names}
        async with (
            Prober(self.posts_url(), auth(self.key)) as http,
            StreamWatcher(self.stream_url) as ws,
            contextlib.AsyncExitStack() as probing,
        ):
            for p in readies.values():
                await probing.enter_async_context(p)
            await asyncio.wait_for(ws.connected.wait(), 30)
            before = await self.posts.publish(3)
            await self.posts.wait_visible(before, 30)
            await asyncio.sleep(1.0)
            yield http, ws, readies, before, http.now(), {n: p.now() for n, p in readies.items()}

    async def freeze_postgres(self, seconds: float) -> Outcome:
        await self._settle()
        out = Outcome(
            f"up: SIGSTOP PostgreSQL {seconds:.0f}s",
            f"SIGSTOP of every PostgreSQL process for {seconds:.0f} s, then SIGCONT",
        )
        async with self._watching(("api", "stream", "projector")) as (http, ws, readies, before, t, t_ready):
            pids = postgres_pids(self.run.postmaster_pid())
            signal_all(pids, signal.SIGSTOP)
            during = await self.posts.publish(3)
            await asyncio.sleep(seconds)
            signal_all(pids, signal.SIGCONT)
            t_cont = http.now()
            visible_in = await self.posts.wait_visible(during, 60)
            await wait_for(lambda: _ok_status(self.posts_url(), auth(self.key)), 30)
            await asyncio.sleep(2.0)
            frozen = [s for s in http.since(t) if s.t < t_cont]
            out.http = fmt_statuses(http.statuses(t))
            first_503 = http.first_of(t, 503)
            slowest = max((s.seconds for s in frozen), default=0.0)
            ready_slowest = max(p.slowest(t_ready[n]) for n, p in readies.items())
            ready_503 = {n: p.first_of(t_ready[n], 503) for n, p in readies.items()}
            out.recover_s = http.first_ok_from(t_cont)
            out.stream = _closes(ws)
            ids = set(before + during)
            out.lost = len(ids - await self.posts.visible(ids))
            out.doubled = ws.doubled(ids)
        out.notes.append(
            f"first 503 {_s(first_503)} after the freeze; slowest partner answer while frozen {_s(slowest)}; "
            f"slowest /readyz {_s(ready_slowest)}; /readyz 503 after "
            + ", ".join(f"{n} {_s(v)}" for n, v in ready_503.items())
        )
        out.notes.append(f"posts published during the freeze visible {_s(visible_in)} after SIGCONT")
        out.criteria = {
            "up still running": self.up_alive(),
            "partner 503 within ~2 s": first_503 is not None and first_503 <= 2.5,
            "no partner request waited > 2.5 s": slowest <= 2.5,
            "/readyz always answered within 1 s": ready_slowest <= 1.0 + 0.25,  # + the client's own scheduling
            "recovered without a restart": out.recover_s is not None and out.recover_s <= 10,
            "0 lost": out.lost == 0,
            "0 doubled": out.doubled == 0,
        }
        if seconds > 12:
            out.scenario = f"up: SIGSTOP PostgreSQL {seconds:.0f}s (stream leases expire)"
            out.criteria["stream closed with 1013"] = 1013 in ws.close_codes()
        self.outcomes.append(out)
        return out

    # ------------------------------------------------------------------ the broker

    async def freeze_broker(self, seconds: float) -> Outcome:
        """A broker that still accepts connections (the kernel does) but answers nothing."""
        await self._settle()
        out = Outcome(
            f"up: SIGSTOP broker {seconds:.0f}s", f"SIGSTOP of up's Apache Kafka for {seconds:.0f} s, then SIGCONT"
        )
        async with self._watching(("stream", "projector")) as (http, ws, readies, before, t, t_ready):
            pid = self.run.broker_pid()
            os.kill(pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)
            t_cont = {n: p.now() for n, p in readies.items()}
            after = await self.posts.publish(3, retry_for_s=30)
            visible_in = await self.posts.wait_visible(after, 60)
            pushed = await wait_for(lambda: _true({i for i, _ in ws.delivered} >= set(after)), 30)
            await wait_for(lambda: _true(all(p.samples and p.samples[-1].status == 200 for p in readies.values())), 30)
            await asyncio.sleep(1.0)
            out.http = fmt_statuses(http.statuses(t))
            frozen_503 = {n: p.first_of(t_ready[n], 503) for n, p in readies.items()}
            ready_again = {n: p.first_ok_after(t_cont[n]) for n, p in readies.items()}
            ready_slowest = max(p.slowest(t_ready[n]) for n, p in readies.items())
            out.recover_s = max((v for v in ready_again.values() if v is not None), default=None)
            out.stream = f"posts published after SIGCONT pushed: {'yes' if pushed is not None else 'NO'}; " + _closes(
                ws
            )
            ids = set(before + after)
            out.lost = len(ids - await self.posts.visible(ids))
            out.doubled = ws.doubled(ids)
        out.notes.append(
            "/readyz 503 after "
            + ", ".join(f"{n} {_s(v)}" for n, v in frozen_503.items())
            + f"; slowest /readyz {_s(ready_slowest)}; ready again after SIGCONT "
            + ", ".join(f"{n} {_s(v)}" for n, v in ready_again.items())
            + f"; posts published after SIGCONT visible in {_s(visible_in)}"
        )
        out.criteria = {
            "up still running": self.up_alive(),
            "reads 200 throughout (reads need no broker)": set(http.statuses(t)) == {"200"},
            "stream and projector not ready within 3 s of the freeze": all(
                v is not None and v <= 3.0 for v in frozen_503.values()
            ),
            "/readyz always answered within 1 s": ready_slowest <= 1.0 + 0.25,
            "ready again within 30 s of SIGCONT": all(v is not None and v <= 30 for v in ready_again.values()),
            "posts published after SIGCONT visible and pushed": visible_in is not None and pushed is not None,
            "0 lost": out.lost == 0,
            "0 doubled": out.doubled == 0,
        }
        self.outcomes.append(out)
        return out

    async def kill_broker(self) -> Outcome:
        await self._settle()
        out = Outcome("up: SIGKILL broker", "SIGKILL of up's Apache Kafka (restarted on its log)")
        async with Prober(self.posts_url(), auth(self.key)) as http, StreamWatcher(self.stream_url) as ws:
            await asyncio.wait_for(ws.connected.wait(), 30)
            await asyncio.sleep(1.0)
            t = http.now()
            started = time.monotonic()
            os.kill(self.run.broker_pid(), signal.SIGKILL)
            await asyncio.sleep(1.0)
            new = await self.posts.publish(1, retry_for_s=30)
            visible_in = await self.posts.wait_visible(new, 60)
            out.recover_s = (time.monotonic() - started) if visible_in is not None else None
            pushed = await wait_for(lambda: _true({i for i, _ in ws.delivered} >= set(new)), 30)
            out.stream = (
                f"posts published after the restart pushed: {'yes' if pushed is not None else 'NO'}; " + _closes(ws)
            )
            out.doubled = ws.doubled()
            await asyncio.sleep(1.0)
            out.http = fmt_statuses(http.statuses(t))
            samples = list(http.since(t))
            reads_ok = bool(samples) and all(s.status == 200 for s in samples)  # no samples proves nothing
            out.lost = len(set(new) - await self.posts.visible(new))
            older = self.posts.published - set(new)
            out.notes.append(
                f"posts projected before the kill still served: {len(await self.posts.visible(older))}/{len(older)}"
            )
        key_ok = (await get_json(f"{self.base}/languages", {"Authorization": f"Bearer {self.run.info['api_key']}"}))[
            0
        ] == 200
        out.notes.append(
            _restart_lines(self.run, "Apache Kafka restarted")
            + "; "
            + _restart_lines(self.run, "came back with its log")
        )
        out.criteria = {
            "up still running": self.up_alive(),
            "reads 200 throughout": reads_ok,
            "new post visible within 30 s": out.recover_s is not None and out.recover_s <= 30,
            "a connected stream client got the post published after the restart": pushed is not None,
            "nothing pushed twice": out.doubled == 0,
            "demo key still works": key_ok,
        }
        self.outcomes.append(out)
        return out

    async def all(self) -> list[Outcome]:
        for name in ("api", "stream", "projector"):
            await self.kill_child(name)
        await self.kill_postgres()
        await self.freeze_postgres(10)
        await self.freeze_postgres(15)
        await self.freeze_broker(10)
        await self.kill_broker()
        return self.outcomes


# --------------------------------------------------------------------------- log reset, services one by one


async def log_reset(outage_s: float = 0.0) -> Outcome:
    """The broker replaced by an empty one under services run one by one, ``outage_s`` after
    the old one stopped (long enough, and the consumers' own stop used to end their loops)."""
    after = f" after a {outage_s:g} s outage" if outage_s else ""
    out = Outcome(
        f"services: log reset{after}",
        f"broker replaced by an empty one (same address){after} under projector, api, stream",
    )
    root = Path(tempfile.mkdtemp(prefix="tickerwire-logreset-"))
    port = free_port()
    pg = EmbeddedPostgres(root / "pg")
    broker = ApacheKafka(root / "kafka", port=port, settings=TEST_KAFKA_SETTINGS)
    background = contextlib.AsyncExitStack()
    try:
        dsn = pg.start()
        bootstrap = broker.start()
        stack = ServiceStack(dsn, bootstrap, "reset", extra_env={"TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S": "2"})
        await stack.prepare()
        projector = await stack.start("projector")
        await stack.start("api")
        stream = await stack.start("stream")
        key = await stack.provision("ws_reset", rate_limit_per_minute=100_000, daily_quota=1_000_000)
        posts = Posts(stack, 8_000_000)
        # A partner connected to the stream throughout (reconnecting if closed).
        watcher = await background.enter_async_context(StreamWatcher(f"{stream.url}{BASE}/stream?key={key}"))
        await asyncio.wait_for(watcher.connected.wait(), 30)
        await posts.publish(30)
        await stack.wait_projected()
        ready_url = readyz_url(f"{projector.admin_url}/metrics")
        # The broker is replaced by an empty one, as after losing its storage.
        broker.stop()
        await asyncio.sleep(outage_s)
        # A new, empty log at the same address.
        broker = ApacheKafka(root / "kafka-new", port=port, settings=TEST_KAFKA_SETTINGS)
        broker.start()
        started = time.monotonic()
        await ensure_topics(stack.config)
        stack.marks.clear()
        new = await posts.publish(5, retry_for_s=30)

        async def loud_or_visible():
            status, body, _ = await get_json(ready_url)
            return (status == 503 and "log discontinuity" in str(body)) or await posts.visible(new) >= set(new)

        decided = await wait_for(loud_or_visible, 60, every=0.25)
        status, body, _ = await get_json(ready_url)
        silent_visible = await posts.visible(new) >= set(new)
        metric = await _metric(
            ops_url(f"{projector.admin_url}/metrics", "/metrics"), "tickerwire_projector_log_discontinuity"
        )
        error_logged = '"level":"error"' in projector.log() and "log discontinuity" in projector.log()
        out.http = f"projector /readyz {status}"
        out.notes.append(
            f"projector /readyz said: {(body or {}).get('detail', '').split('; log discontinuity')[0]}; ..."
        )
        out.notes.append(
            f"decided (503 with the reason, or visible) {_s(decided)} after the new broker started; "
            f"tickerwire_projector_log_discontinuity max {metric}"
        )
        # The documented way out.
        accept = subprocess.run(
            [sys.executable, "-m", "tickerwire.services.cli.main", "projector", "accept-log", "--from", "earliest"],
            env=stack.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        out.notes.append(f"accept-log: rc {accept.returncode}, {len(accept.stdout.splitlines())} partition(s) moved")
        visible_in = await posts.wait_visible(new, 60)
        out.recover_s = (time.monotonic() - started) if visible_in is not None else None
        out.lost = len(set(new) - await posts.visible(new))
        new_key = await stack.provision("ws_after_reset", rate_limit_per_minute=100_000, daily_quota=1_000_000)
        api = stack.of("api")[0]
        key_status = (await get_json(f"{api.url}{BASE}/languages", auth(new_key)))[0]
        ready_after = (await get_json(ready_url))[0]
        stream_ready = await wait_for(lambda: _ok_status(readyz_url(f"{stream.admin_url}/metrics"), {}), 30)
        out.notes.append(f"stream /readyz 200 again {_s(stream_ready)} after the projector recovered")
        pushed = await wait_for(lambda: _true({i for i, _ in watcher.delivered} >= set(new)), 30)
        await background.aclose()
        unpushed = len(set(new) - {i for i, _ in watcher.delivered})
        out.stream = (
            f"{len(new) - unpushed}/{len(new)} posts published after the reset pushed ({_s(pushed)} after the stream was ready); "
            + _closes(watcher)
        )
        out.doubled = watcher.doubled()
        out.criteria = {
            "never silent: visible, or 503 + reason + ERROR log + metric": silent_visible
            or (status == 503 and "log discontinuity" in str(body) and error_logged and metric == 1.0),
            "accept-log exits 0": accept.returncode == 0,
            "posts published after the reset visible after accept-log": out.lost == 0,
            "a key issued after the reset works": key_status == 200,
            "projector ready again": ready_after == 200,
            "stream ready again": stream_ready is not None,
            "a connected stream client got every post published after the reset": unpushed == 0,
            "nothing pushed twice": out.doubled == 0,
        }
        del key
        stack.stop_all()
    finally:
        await background.aclose()
        broker.stop()
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


# --------------------------------------------------------------------------- helpers


def _true(value: bool):
    async def f():
        return value

    return f()


async def _ok_status(url: str, headers: dict) -> bool:
    return (await get_json(url, headers, timeout=3))[0] == 200


async def _metric(url: str, name: str) -> float | None:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
            async with s.get(url) as resp:
                text = await resp.text()
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    return max(values) if values else None


def _token_event(ticker: str) -> TokenEvent:
    token = Token(
        ticker=ticker,
        name=ticker,
        logo_url="https://example.com/logo.png",
        market_cap_rank=None,
        genesis_date=None,
        primary_ecosystem=None,
        homepage_url="https://example.com",
        description=None,
    )
    return TokenEvent(version=1, emitted_at=datetime.now(timezone.utc), data=token)


def _closes(ws: StreamWatcher) -> str:
    codes = ws.close_codes()
    return ", ".join(str(c) if c is not None else "refused" for c in codes) if codes else "none"


def _restart_lines(run: UpRun, word: str) -> str:
    lines = [line.split("] ", 1)[-1] for line in run.lines if word in line and line.startswith("[")]
    return lines[-1] if lines else f"(no `{word}` line on up's output)"


def _s(v: float | None) -> str:
    return "never" if v is None else f"{v:.1f}s"
