"""`tickerwire up` as a user runs it: it comes up, serves, survives a crashed child, refuses a
second `up` on its state dir, and Ctrl-C leaves nothing behind; its Apache Kafka log, read
model, key and cursors outlive Ctrl-C. (One file: two `up`s at once on the same machine race for the
embedded servers' default ports, and xdist runs a file on one worker.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support.faults import alive, pid_listening_on, start_up, stop_up, up_command, up_env, up_ports, wait_up
from tests.support.ws import session
from tickerwire.devstack.embedded import kafka_jars
from tickerwire.devstack.embedded.ports import listens_on, port_is_free

pytestmark = pytest.mark.e2e


def pids_of(info: dict, state_dir: Path) -> list[int]:
    pg = int((state_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
    return [info["pids"]["up"], pg, *info["pids"]["children"].values()]


async def exercise(info: dict, ports: dict[str, int]) -> None:
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    async with aiohttp.ClientSession() as http:
        for name in ("api", "stream", "projector"):  # up.json records each process's admin listener
            assert info["admin"][name] == f"http://127.0.0.1:{ports[name + '_admin_port']}"
            # Ready within 30 s: a process may still be catching up after a fault a test made.
            deadline = time.monotonic() + 30
            while True:
                async with http.get(info["admin"][name] + "/readyz") as resp:
                    status, body = resp.status, await resp.text()
                if status == 200 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert status == 200, f"{name} /readyz: {body}"
            async with http.get(info["metrics"][name]) as resp:
                assert resp.status == 200
        async with http.get(info["base_url"].split("/api/")[0] + "/metrics") as resp:
            assert resp.status == 404  # not on the partner port
        async with http.get(info["base_url"] + "/languages", headers=headers) as resp:
            assert resp.status == 200
            assert len((await resp.json())["languages"]) == 14
        async with http.get(info["base_url"] + "/posts", headers=headers) as resp:
            assert resp.status == 200
            assert (await resp.json())["posts"]
        async with http.get(info["docs_url"]) as resp:  # no key
            assert resp.status == 200 and resp.content_type == "text/html"
        async with session(http, info["stream_url"]) as (ws, _):
            kinds = set()
            for _ in range(20):
                kinds.add(orjson.loads((await ws.receive(timeout=10)).data)["type"])
                if "post.created" in kinds:
                    break
            assert "post.created" in kinds


async def partner_targets(info: dict) -> None:
    """up opens loopback to webhooks, and only that, to a partner's registration too: the refused
    addresses get the 400 naming the url (nothing is published, so nothing is ever sent there)."""
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    endpoints = info["base_url"] + "/webhooks/endpoints"
    async with aiohttp.ClientSession() as http:
        for url in ("http://10.0.0.1/hook", "http://169.254.169.254/latest/meta-data/", "http://[fc00::1]/hook"):
            async with http.post(endpoints, json={"url": url}, headers=headers) as resp:
                error = (await resp.json())["error"]
                assert (resp.status, error["code"], error["field"]) == (400, "VALIDATION_FAILED", "url"), error
        async with http.post(endpoints, json={"url": "http://127.0.0.1:9/hook"}, headers=headers) as resp:
            assert resp.status == 201, await resp.text()
            created = (await resp.json())["endpoint"]["id"]
        async with http.get(endpoints, headers=headers) as resp:
            assert [e["id"] for e in (await resp.json())["endpoints"]] == [created]
        async with http.delete(f"{endpoints}/{created}", headers=headers) as resp:
            assert resp.status == 204


async def served_again_after_killing_the_api(info: dict, state_dir: Path) -> float:
    """SIGKILL the api child; seconds until the partner gets 200 again."""
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    api_pid = info["pids"]["children"]["api"]
    os.kill(api_pid, signal.SIGKILL)
    killed = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        while time.monotonic() - killed < 30:
            try:
                async with http.get(info["base_url"] + "/languages", headers=headers) as resp:
                    if resp.status == 200 and time.monotonic() - killed > 0.2:
                        return time.monotonic() - killed
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("the api was not served again within 30 s")


def second_up_is_refused(state_dir: Path, ports: dict[str, int]) -> tuple[int, str, float]:
    started = time.monotonic()
    result = subprocess.run(up_command(state_dir, ports), env=up_env(), capture_output=True, text=True, timeout=30)
    return result.returncode, result.stderr, time.monotonic() - started


def test_up_serves_survives_and_ctrl_c_leaves_nothing_behind():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    ports = up_ports()
    for attempt in range(2):  # the second run proves a restart starts cleanly
        run = start_up(state_dir, ports)
        try:
            wait_up(run)
            assert any("API key:" in line for line in run.lines)
            info = run.info
            asyncio.run(exercise(info, ports))
            if attempt == 0:
                rc, err, seconds = second_up_is_refused(state_dir, ports)
                assert rc != 0 and seconds < 5, (rc, seconds)
                assert "another tickerwire up" in err and str(state_dir) in err
                assert (state_dir / "up.json").exists() and (state_dir / "pgdata").exists()
                asyncio.run(exercise(info, ports))  # the first one still serves, data and all
                killed = info["pids"]["children"]["api"]
                assert asyncio.run(served_again_after_killing_the_api(info, state_dir)) < 10
                assert run.proc.poll() is None
                info = run.info  # the state file names the restarted child, and its part's state
                assert info["pids"]["children"]["api"] != killed and alive(info["pids"]["children"]["api"])
                api = info["parts"]["api"]
                assert (api["state"], api["restarts"], api["pid"]) == (
                    "running",
                    1,
                    info["pids"]["children"]["api"],
                ), api
                assert api["reason"] == "status -9"
                others = {name: part["state"] for name, part in info["parts"].items() if name != "api"}
                assert others == dict.fromkeys(("projector", "stream", "dispatcher", "postgres", "kafka"), "running")
            pids = pids_of(info, state_dir)
        finally:
            assert stop_up(run) == 0
        run.lines += run.proc.stdout.read().splitlines() if run.proc.stdout else []
        assert any(line.startswith("  parts:      projector running, api running") for line in run.lines)
        if attempt == 0:
            said = [line.split("] ", 1)[-1] for line in run.lines]
            assert any(line.startswith("api exited (status -9): running → backoff; next start in") for line in said)
            assert "api starting: backoff → starting" in said
            assert "api restarted" in "\n".join(said) and any(line.endswith("starting → running") for line in said)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in pids if alive(p)], f"run {attempt}: processes left behind"
        held = [
            p
            for p in [
                *ports.values(),
                int(info["database_url"].split(":")[-1].split("/")[0]),
                int(info["kafka_bootstrap_servers"].rsplit(":", 1)[1]),
            ]
            if not port_is_free(p)
        ]
        assert not held, f"run {attempt}: ports still held: {held}"
        assert not (state_dir / "up.json").exists()
    shutil.rmtree(state_dir)  # passed: its data and logs are not needed (a failure keeps them)


# `tickerwire up --replicas 1` (here, not in a file of its own: two `up`s at once on the same
# machine race for the embedded servers' default ports).


async def replicas_check(admin_url: str, until: str, timeout: float = 20.0) -> str:
    """The API's readiness detail of its replicas, once it says ``until`` (else the last one)."""
    deadline = time.monotonic() + timeout
    detail = ""
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.get(admin_url + "/readyz") as resp:
                detail = orjson.loads(await resp.read())["checks"]["replicas"]["detail"]
            if detail == until:
                break
            await asyncio.sleep(0.1)
    return detail


async def served(info: dict) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.get(
            info["base_url"] + "/posts", headers={"Authorization": f"Bearer {info['api_key']}"}
        ) as resp:
            return resp.status


def test_up_starts_a_replica_the_api_reads_from_and_restarts_it_when_it_dies():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    # No dispatcher: the refused addresses an operator and a partner try to register here could
    # never be sent a request, even by a build that accepted them (every_operator_command).
    run = start_up(state_dir, up_ports(), "--replicas", "1", "--no-trickle", "--no-dispatcher")
    try:
        wait_up(run)
        info = run.info
        assert len(info["database_read_urls"]) == 1
        assert asyncio.run(replicas_check(info["admin"]["api"], "1 of 1 in rotation")) == "1 of 1 in rotation"
        assert asyncio.run(served(info)) == 200
        replica_pid = int((state_dir / "pgreplica1" / "postmaster.pid").read_text().split()[0])
        os.kill(replica_pid, signal.SIGKILL)
        assert asyncio.run(served(info)) == 200  # from the primary meanwhile
        restarted, deadline = replica_pid, time.monotonic() + 20
        while restarted == replica_pid and time.monotonic() < deadline:
            time.sleep(0.1)
            with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
                restarted = int((state_dir / "pgreplica1" / "postmaster.pid").read_text().split()[0])
        assert restarted != replica_pid, "up did not restart the replica"
        assert asyncio.run(replicas_check(info["admin"]["api"], "1 of 1 in rotation")) == "1 of 1 in rotation"
        replica = part_once(run, "postgres-replica-1", restarts=1)
        assert (replica["state"], replica["pid"]) == ("running", restarted), replica
    finally:
        assert stop_up(run) == 0
    run.lines += run.proc.stdout.read().splitlines() if run.proc.stdout else []
    assert any("embedded PostgreSQL replica 1 restarted" in line for line in run.lines), run.lines[-10:]
    deadline = time.monotonic() + 10
    while alive(restarted) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(restarted)
    shutil.rmtree(state_dir)


def test_up_runs_several_api_and_stream_processes_on_one_port_each():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    run = start_up(state_dir, up_ports(), "--api-processes", "2", "--stream-processes", "2", "--no-trickle")
    try:
        wait_up(run)
        info = run.info
        assert {"api", "api-2", "stream", "stream-2", "projector", "dispatcher"} == set(info["admin"])
        assert set(info["pids"]["children"]) == set(info["admin"])
        assert asyncio.run(all_ready(info))
        api_pids = {info["pids"]["children"][n] for n in ("api", "api-2")}
        port = listener_port(info["base_url"])
        assert all(listens_on(pid, port) for pid in api_pids), "both API processes listen on the one port"
        assert asyncio.run(served(info)) == 200
    finally:
        assert stop_up(run) == 0
    shutil.rmtree(state_dir)


#: How long after `tickerwire failover` returns the API may take to serve from the new primary
#: again, every process ready (measured: 2 to 3 s, the admission's reconnection backoff; room
#: for a shared 2-core machine).
FAILOVER_SERVED_WITHIN_S = 15.0


async def all_ready(info: dict) -> bool:
    """Every process's /readyz says 200 (admin ports: no rate limit to spend)."""
    async with aiohttp.ClientSession() as http:
        for url in info["admin"].values():
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(url + "/readyz") as resp:
                    if resp.status == 200:
                        continue
            return False
    return True


def test_up_fails_over_to_its_replica_and_every_process_follows_without_a_restart():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    run = start_up(state_dir, up_ports(), "--replicas", "1")  # the demo trickle publishes a post a second
    try:
        wait_up(run)
        info, children = run.info, run.children()
        old = info["postgres_primary_port"]
        before = asyncio.run(newest_post(info))
        result = subprocess.run(
            [sys.executable, "-m", "tickerwire.services.cli.main", "failover", "--state-dir", str(state_dir)],
            env=up_env(),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert result.returncode == 0, result.stderr
        assert (
            f"the primary is now port {info['database_read_urls'][0].rpartition(':')[2].split('/')[0]}" in result.stdout
        )
        done = time.monotonic()
        # A request a second at most (the demo workspace allows 60 a minute): counted requests need
        # the admission's connections, which reconnect to the new primary with a backoff.
        while not (asyncio.run(all_ready(run.info)) and asyncio.run(served(run.info)) == 200):
            assert time.monotonic() - done < FAILOVER_SERVED_WITHIN_S, "not served and ready in time"
            time.sleep(1.0)
        assert run.info["postgres_primary_port"] != old
        assert run.children() == children  # nobody restarted
        # The trickle's posts are projected on the new primary (a request every 2 s: the demo
        # workspace allows 60 a minute).
        newest, deadline = before, time.monotonic() + 30
        while newest <= before and time.monotonic() < deadline:
            time.sleep(2)
            newest = asyncio.run(newest_post(run.info))
        assert newest > before
        assert (state_dir / "pgdata" / "standby.signal").exists()  # the old primary follows the new one
    finally:
        assert stop_up(run) == 0
    run.lines += run.proc.stdout.read().splitlines() if run.proc.stdout else []
    assert any("failover: done in" in line for line in run.lines), run.lines[-10:]
    shutil.rmtree(state_dir)


def test_failover_without_a_running_up_says_so_in_one_line():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    result = subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", "failover", "--state-dir", str(state_dir)],
        env=up_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "no `tickerwire up` is running" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    shutil.rmtree(state_dir)


def refused(*extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """``up`` run with these arguments, expected to refuse at once; its result and state directory."""
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    result = subprocess.run(
        up_command(state_dir, up_ports(), *extra), env=env or up_env(), capture_output=True, text=True, timeout=60
    )
    return result, state_dir


def test_up_refuses_a_configured_database_without_a_configured_broker():
    result, state_dir = refused(env={**up_env(), "TICKERWIRE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/nothing"})
    assert result.returncode == 1
    assert "a configured database needs a configured broker too" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (state_dir / "pgdata").exists() and not (state_dir / "broker.log").exists()  # nothing was started
    shutil.rmtree(state_dir)


def collect(stream, lines: list[str]) -> threading.Thread:
    def read() -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def listener_port(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def assert_exited_with_one_line(run: subprocess.Popen, err: list[str]) -> None:
    assert run.returncode != 0
    # stderr also has up's own log records (JSON lines); what it says to the user is one line.
    said = [line for line in err if not line.startswith("{")]
    assert len(said) == 1 and said[0].startswith("tickerwire up: "), err


def assert_each_serves_on_its_own_ports(infos: list[dict]) -> None:
    """No port is shared between the ups, and each up's listeners are its own children's."""
    listeners = [
        {
            "api": listener_port(info["base_url"]),
            "stream": listener_port(info["stream_url"]),
            **{f"{name}_admin": listener_port(url) for name, url in info["admin"].items()},
        }
        for info in infos
    ]
    if len(infos) == 2:
        assert not set(listeners[0].values()) & set(listeners[1].values()), listeners
    for info, ports_of in zip(infos, listeners):
        children = dict(info["pids"]["children"])
        for name, port in ports_of.items():
            assert listens_on(children[name.removesuffix("_admin")], port) is not False, (name, port)
        asyncio.run(exercise(info, {f"{k}_port": v for k, v in ports_of.items()}))


def test_two_ups_started_at_once_both_serve_on_distinct_ports_or_one_exits_with_one_line():
    # The same preferred ports for both: what two `up`s choosing free ports at the same moment get.
    ports = up_ports()
    dirs = [Path(tempfile.mkdtemp(prefix="tickerwire-up-race-")) for _ in range(2)]
    runs = [
        subprocess.Popen(up_command(d, ports), env=up_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for d in dirs
    ]
    out: list[list[str]] = [[], []]
    err: list[list[str]] = [[], []]
    readers = [collect(run.stdout, out[i]) for i, run in enumerate(runs)] + [
        collect(run.stderr, err[i]) for i, run in enumerate(runs)
    ]
    started = time.monotonic()
    try:

        def settled(i: int) -> bool:
            return any(line.startswith("Ctrl-C stops everything") for line in out[i]) or runs[i].poll() is not None

        while not all(settled(i) for i in range(2)) and time.monotonic() - started < 60:
            time.sleep(0.2)
        assert all(settled(i) for i in range(2)), f"not up and not exited within 60 s: {out} {err}"
        up = [i for i in range(2) if runs[i].poll() is None]
        assert up, f"neither up runs: {err}"
        for i in set(range(2)) - set(up):
            for reader in readers:
                reader.join(timeout=5)
            assert_exited_with_one_line(runs[i], err[i])
        assert_each_serves_on_its_own_ports([orjson.loads((dirs[i] / "up.json").read_bytes()) for i in up])
    finally:
        for run in runs:
            if run.poll() is None:
                run.send_signal(signal.SIGINT)
        for run in runs:
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


# `tickerwire up`'s Apache Kafka, its log kept in the state directory with everything else.

#: The catalog and access events of the demo: a start that replays the log applies them again.
REPLAYED_TYPES = ("locale", "category", "token", "workspace", "api_key", "embed")


async def served_posts(info: dict) -> dict[int, str]:
    """Every post the API serves (id -> title), paged with ``before``."""
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    posts: dict[int, str] = {}
    query = "limit=50"
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(f"{info['base_url']}/posts?{query}", headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                page = (await resp.json())["posts"]
            if not page:
                return posts
            posts.update((post["id"], post["title"]) for post in page)
            query = f"limit=50&before={min(post['id'] for post in page)}"


async def newest_post(info: dict) -> int:
    """The highest post id among the 20 newest served (one request: the demo workspace allows 60
    a minute). Not just the newest: the trickle backdates some posts, which sort lower."""
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"{info['base_url']}/posts?limit=20", headers={"Authorization": f"Bearer {info['api_key']}"}
        ) as resp:
            assert resp.status == 200, await resp.text()
            return max(post["id"] for post in (await resp.json())["posts"])


async def projector_metrics(info: dict) -> dict[str, float]:
    """The projector's samples (``name{labels}`` -> value)."""
    async with aiohttp.ClientSession() as http:
        async with http.get(info["metrics"]["projector"]) as resp:
            text = await resp.text()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def left_nothing_behind(info: dict, broker_pid: int) -> None:
    """No process and no broker port of the stopped ``up`` is left."""
    pids = [info["pids"]["up"], *info["pids"]["children"].values(), broker_pid]
    deadline = time.monotonic() + 15
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], "processes left behind"
    assert port_is_free(int(info["kafka_bootstrap_servers"].rsplit(":", 1)[1]))


def part_once(run, name: str, restarts: int, timeout: float = 30) -> dict:
    """The part ``name`` of up.json once it counts ``restarts`` and runs (up writes the file
    just after it says so)."""
    deadline = time.monotonic() + timeout
    while True:
        part = run.info["parts"][name]
        if (part["restarts"], part["state"]) == (restarts, "running") or time.monotonic() > deadline:
            return part
        time.sleep(0.1)


def kill_and_wait_for(run, pid: int | None, said: str, timeout: float = 120) -> None:
    """SIGKILL ``pid`` (a broker ``up`` started) and wait until ``up`` says ``said``."""
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    collect(run.proc.stdout, run.lines)
    deadline = time.monotonic() + timeout
    while not any(said in line for line in run.lines) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert any(said in line for line in run.lines), run.lines[-5:]


async def walk_changes(info: dict, cursor: str | None = None) -> tuple[list[tuple[int, str]], str]:
    """Every en-US announcement `/changes` returns after ``cursor`` (from the start: None), in
    order, and the cursor at its end (50 a page: the demo workspace allows 60 requests a minute)."""
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    seen: list[tuple[int, str]] = []
    async with aiohttp.ClientSession() as http:
        while True:
            query = "lang=en-US&limit=50" + (f"&cursor={cursor}" if cursor else "")
            async with http.get(f"{info['base_url']}/changes?{query}", headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                page = await resp.json()
            seen += [(post["id"], post["lang"]) for post in page["posts"]]
            cursor = page["cursor"]
            if not page["has_more"]:
                assert cursor is not None
                return seen, cursor


def test_up_serves_the_same_posts_key_and_cursors_after_ctrl_c_and_a_second_start():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-apache-"))
    ports = up_ports()
    run = start_up(state_dir, ports, "--broker", "apache")  # the one broker, still accepted by name
    try:
        wait_up(run, timeout=150)
        first = run.info
        assert first["broker"] == "apache"
        assert set(first["start_seconds"]) >= {"kafka", "postgres", "migrations", "services", "demo", "total"}
        assert first["kafka_rss_mb"]["1"] > 50, first["kafka_rss_mb"]
        _, first_cursor = asyncio.run(walk_changes(first))  # a partner starts walking at the frontier
        asyncio.run(exercise(first, ports))  # the demo data, the stream (a trickled post), /readyz of each
        before = asyncio.run(served_posts(first))
        demo = {i: title for i, title in before.items() if i <= 60}  # `up_command` publishes 60
        assert len(demo) > 30 and max(before) > 60, sorted(before)  # and the trickle goes on above them
        # The partner's saved cursor; then the trickle publishes more before the stop.
        walked_before, saved_cursor = asyncio.run(walk_changes(first, first_cursor))
        newest_then, deadline = max(before), time.monotonic() + 60
        while asyncio.run(newest_post(first)) <= newest_then and time.monotonic() < deadline:
            time.sleep(2)
        broker_pid = run.broker_pid()
        assert broker_pid is not None
    finally:
        assert stop_up(run) == 0  # SIGINT, as Ctrl-C
    left_nothing_behind(first, broker_pid)
    assert (state_dir / "kafka" / "log").is_dir() and (state_dir / "pgdata").is_dir()
    projector_log = state_dir / "projector.log"
    first_run_log = projector_log.stat().st_size

    run = start_up(state_dir, ports)
    try:
        wait_up(run, timeout=150)
        second = run.info
        assert second["api_key"] == first["api_key"]  # kept beside the log, which has its hash
        asyncio.run(exercise(second, ports))  # the key is served, every process is ready
        # The cursor saved before the stop resumes: nothing it covered comes again, nothing after it is missed.
        # The whole walk since the first cursor is what was walked before the stop and what the
        # saved cursor resumes (and what the trickle published since, walked last). The order
        # holds within a partition only, so sets are compared.
        resumed, resumed_cursor = asyncio.run(walk_changes(second, saved_cursor))
        everything, _ = asyncio.run(walk_changes(second, first_cursor))
        later, _ = asyncio.run(walk_changes(second, resumed_cursor))
        assert walked_before and resumed, (walked_before, resumed)
        assert not set(resumed) & set(walked_before), "a resumed cursor doubled announcements"
        assert len(set(everything)) == len(everything) and not set(later) & set(resumed)
        assert set(walked_before) | set(resumed) <= set(everything)
        missed = set(everything) - set(walked_before) - set(resumed) - set(later)
        assert not missed, f"missed after the resumed cursor: {sorted(missed)}"
        after = asyncio.run(served_posts(second))
        assert set(before) <= set(after), sorted(set(before) - set(after))
        assert {i: after[i] for i in demo} == demo  # the same posts, not a new demo dataset
        assert max(after) > max(before)  # the trickle goes on above the kept posts
        samples = asyncio.run(projector_metrics(second))
        # The read model was kept: nothing of the kept log's catalog or access was applied again.
        replayed = {t: samples[f'tickerwire_projector_events_applied_total{{type="{t}"}}'] for t in REPLAYED_TYPES}
        assert not any(replayed.values()), replayed
        stopped = {k: v for k, v in samples.items() if k.startswith("tickerwire_projector_log_discontinuity") and v}
        assert not stopped, stopped
        # The broker dies: up restarts it on its log and port, and nothing needs re-syncing.
        killed = run.broker_pid()
        kill_and_wait_for(run, killed, "came back with its log")
        broker_pid = run.broker_pid()
        kafka = part_once(run, "kafka", restarts=1)
        assert (kafka["state"], kafka["pid"]) == ("running", broker_pid), kafka
        assert (
            broker_pid not in (None, killed)
            and run.info["kafka_bootstrap_servers"] == second["kafka_bootstrap_servers"]
        )
        newest, deadline = max(after), time.monotonic() + 90
        while asyncio.run(newest_post(second)) <= newest and time.monotonic() < deadline:
            time.sleep(2)
        assert asyncio.run(newest_post(second)) > newest  # the trickle and the projector go on
        asyncio.run(exercise(second, ports))
    finally:
        assert stop_up(run) == 0
    left_nothing_behind(second, broker_pid)
    second_run = projector_log.read_bytes()[first_run_log:].decode()
    assert second_run and "projection of this partition is stopped" not in second_run  # no log discontinuity
    said = "\n".join(run.lines)
    assert "an earlier start's, kept" in said and "re-syncing" not in said and "came back empty" not in said
    shutil.rmtree(state_dir)  # passed: a failure keeps its logs


def test_up_on_three_kafka_nodes_declares_replicated_topics_and_restarts_a_dead_node_alone():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-kafka3-"))
    ports = up_ports()
    run = start_up(state_dir, ports, "--brokers", "3")
    try:
        wait_up(run, timeout=240)
        info = run.info
        nodes = [int(server.rsplit(":", 1)[1]) for server in info["kafka_bootstrap_servers"].split(",")]
        assert info["broker"] == "apache" and info["broker_nodes"] == 3 and len(set(nodes)) == 3, info
        asyncio.run(exercise(info, ports))  # the demo data, the stream (a trickled post), /readyz of each
        # The topics as declared for production: replication factor 3, min.insync.replicas=2.
        env = {
            **up_env(),
            "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": info["kafka_bootstrap_servers"],
            "TICKERWIRE_DATABASE_URL": info["database_url"],
        }
        argv = [sys.executable, "-m", "tickerwire.services.cli.main", "topics", "check"]
        checked = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert (checked.returncode, checked.stdout.strip()) == (0, "topics match the declaration"), checked
        # A node dies: up restarts it alone, on its ports and log; the others never stopped.
        others = [pid_listening_on(port) for port in (nodes[0], nodes[2])]
        killed = pid_listening_on(nodes[1])
        assert None not in others
        kill_and_wait_for(run, killed, "Apache Kafka node 2 restarted")
        assert pid_listening_on(nodes[1]) not in (None, killed)
        assert part_once(run, "kafka-node-2", restarts=1)["state"] == "running"
        assert [run.info["parts"][f"kafka-node-{n}"]["restarts"] for n in (1, 3)] == [0, 0]
        assert [pid_listening_on(port) for port in (nodes[0], nodes[2])] == others
        asyncio.run(exercise(info, ports))
    finally:
        assert stop_up(run) == 0
    assert all(port_is_free(port) for port in nodes)
    assert all((state_dir / "kafka3" / f"node{n}" / "log").is_dir() for n in (1, 2, 3))
    shutil.rmtree(state_dir)  # passed: a failure keeps its logs


def test_up_without_the_kafka_jars_and_no_network_says_what_is_missing_in_one_line():
    env = {
        **up_env(),
        kafka_jars.CACHE_ENV: tempfile.mkdtemp(prefix="tickerwire-empty-cache-"),
        kafka_jars.REPOSITORY_ENV: "http://127.0.0.1:9/maven2",  # nothing listens: no network
    }
    result, state_dir = refused(env=env)
    assert result.returncode == 1
    said = [line for line in result.stderr.splitlines() if line.startswith("tickerwire up:")]
    assert len(said) == 1, result.stderr
    assert f"the Apache Kafka {kafka_jars.kafka_version()} jars are not all in" in said[0]
    assert "46 of 46 could not be fetched" in said[0] and kafka_jars.LIBS_ENV in said[0], said
    assert "Traceback" not in result.stderr and not (state_dir / "pgdata").exists()
    shutil.rmtree(state_dir)
    shutil.rmtree(env[kafka_jars.CACHE_ENV])


def test_up_refuses_three_nodes_with_a_configured_kafka_and_a_state_dir_it_cannot_follow():
    result, state_dir = refused("--brokers", "3", "--kafka", "127.0.0.1:1")
    assert result.returncode == 1
    assert "--brokers 3 starts a cluster of Apache Kafka nodes of up's own" in result.stderr
    assert "Traceback" not in result.stderr and not (state_dir / "pgdata").exists()
    shutil.rmtree(state_dir)
    # A state directory of an earlier version, whose broker kept its log in memory: refused, not wiped.
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-old-"))
    (state_dir / "pgdata").mkdir()
    (state_dir / "pgdata" / "PG_VERSION").write_text("16\n")
    result = subprocess.run(up_command(state_dir, up_ports()), env=up_env(), capture_output=True, text=True, timeout=60)
    said = [line for line in result.stderr.splitlines() if line.startswith("tickerwire up:")]
    assert result.returncode == 1 and len(said) == 1, result.stderr
    assert "was projected from a log that is gone" in said[0] and "--fresh" in said[0], said
    assert (state_dir / "pgdata" / "PG_VERSION").exists() and not (state_dir / "kafka").exists()
    shutil.rmtree(state_dir)


# Every operator command that touches the database, on `up --replicas 1` (the services' and the
# commands' URL names both servers, with target_session_attrs=read-write), then across a
# `tickerwire failover`. One `up` for all of it: a start costs tens of seconds.


@pytest.fixture(scope="module")
def replicated_up():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    # No dispatcher: the refused addresses an operator and a partner try to register here could
    # never be sent a request, even by a build that accepted them (every_operator_command).
    run = start_up(state_dir, up_ports(), "--replicas", "1", "--no-trickle", "--no-dispatcher")
    try:
        wait_up(run)
        yield run
    finally:
        assert stop_up(run) == 0
    shutil.rmtree(state_dir)


def command(run, *args: str) -> subprocess.CompletedProcess:
    """``tickerwire ARGS`` as an operator runs it beside ``up``: its settings from up.json."""
    return subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", *args],
        env={**up_env(), "TICKERWIRE_STATE_DIR": str(run.state_dir)},
        input="",
        capture_output=True,
        text=True,
        timeout=180,
    )


def done(run, *args: str, status: int = 0) -> subprocess.CompletedProcess:
    result = command(run, *args)
    assert result.returncode == status, (args, result.stderr)
    assert "Traceback" not in result.stderr and "unreachable" not in result.stderr, (args, result.stderr)
    return result


async def _read_model_value(info: dict, query: str, *args: object) -> object:
    import asyncpg

    conn = await asyncpg.connect(info["database_url"], server_settings={"search_path": "rm"}, timeout=10)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


def projected(run, query: str, *args: object, timeout: float = 60.0) -> object:
    """The first non-null answer of ``query`` on the read model (through the multi-host URL)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # not yet there, or the primary failing over
            found = asyncio.run(_read_model_value(run.info, query, *args))
            if found is not None:
                return found
        time.sleep(0.5)
    raise AssertionError(f"not projected within {timeout:.0f} s: {query} {args}")


async def _publish_poison(info: dict) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=info["kafka_bootstrap_servers"])
    await producer.start()
    try:
        await producer.send_and_wait(f"{info['topic_prefix']}.catalog.v1", b"not an event", key=b"poison")
    finally:
        await producer.stop()


def every_operator_command(run, n: int) -> None:
    """Each command of `tickerwire --help` that reads or writes PostgreSQL, succeeding (or, for a
    poison record's retry, refused for what it is, never for the database)."""
    ws, key, embed, hook = f"ws_ops{n}", f"key_ops{n}", f"bdg_ops{n}0001", f"whe_ops{n}0001"
    assert done(run, "migrate").stdout.strip() == "up to date"
    done(run, "workspace", "create", ws)
    projected(run, "SELECT version FROM workspaces WHERE id = $1", ws)
    done(run, "workspace", "update", ws, "--rate-limit", "120")
    done(run, "workspace", "suspend", ws)
    done(run, "workspace", "reinstate", ws)
    assert done(run, "key", "issue", ws, "--id", key).stdout.strip()
    projected(run, "SELECT version FROM api_keys WHERE id = $1", key)
    done(run, "key", "revoke", key)
    done(run, "embed", embed, ws)
    projected(run, "SELECT 1 FROM embeds WHERE id = $1", embed)
    done(run, "heartbeat", embed, ws)
    # up opens loopback to webhooks, and only that: refused at registration, nothing published,
    # to an operator and to a partner.
    for target, why in (
        ("http://10.0.0.1/hook", "a private address"),
        ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
        ("http://[fc00::1]/hook", "a private address"),
    ):
        refused = done(run, "webhooks", "register", "--workspace", ws, "--url", target, status=2).stderr
        assert (
            len(refused.splitlines()) == 1 and why in refused and "opened to webhooks: 127.0.0.0/8,::1/128" in refused
        )
    if n == 1:
        asyncio.run(partner_targets(run.info))
    assert done(run, "webhooks", "register", "--workspace", ws, "--url", "http://127.0.0.1:9/hook", "--id", hook).stdout
    projected(run, "SELECT version FROM webhook_endpoints WHERE id = $1", hook)
    assert hook in done(run, "webhooks", "list", "--workspace", ws).stdout
    for action in ("pause", "resume", "rotate-secret"):
        done(run, "webhooks", action, hook)
    done(run, "webhooks", "replay", hook, "--since", "2026-01-01T00:00:00Z")
    done(run, "webhooks", "remove", hook)
    topic = f"{run.info['topic_prefix']}.catalog.v1"
    letter = done(run, "dead-letters", "list", "--topic", topic).stdout.split("\t")[0]
    done(run, "dead-letters", "show", letter)
    assert "nothing was published" in done(run, "dead-letters", "retry", letter, status=1).stderr
    done(run, "dead-letters", "retry", "--all", "--kind", "rejected")
    done(run, "sweep")
    done(run, "projector", "accept-log")
    done(run, "projector", "rebuild")


def test_every_operator_command_works_on_the_replicated_url_and_across_a_failover(replicated_up):
    run = replicated_up
    assert "target_session_attrs=read-write" in run.info["database_url"]
    assert "dispatcher" not in run.info["admin"]  # --no-dispatcher: nothing here sends a webhook
    asyncio.run(_publish_poison(run.info))  # a dead letter for `dead-letters show | retry`
    projected(run, "SELECT id FROM dead_letters WHERE topic = $1", f"{run.info['topic_prefix']}.catalog.v1")
    every_operator_command(run, 1)
    old = run.info["postgres_primary_port"]
    failover = subprocess.Popen(
        [sys.executable, "-m", "tickerwire.services.cli.main", "failover", "--state-dir", str(run.state_dir)],
        env=up_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # A command as soon as the primary is gone: it gets the writable server once there is one (the
    # replica, promoted within seconds), retrying meanwhile if it is not promoted yet.
    deadline = time.monotonic() + 60
    while not port_is_free(old) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert port_is_free(old), "the primary was not killed"
    done(run, "webhooks", "list")
    out, err = failover.communicate(timeout=240)
    assert failover.returncode == 0, err
    assert run.info["postgres_primary_port"] != old
    every_operator_command(run, 2)
