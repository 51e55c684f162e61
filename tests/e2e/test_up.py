"""`tickerwire up` as a user runs it: it comes up, serves, survives a crashed child, refuses a
second `up` on its state dir, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support.faults import alive, start_up, stop_up, up_command, up_env, up_ports, wait_up
from tests.support.ws import session
from tickerwire.devstack.embedded.ports import listens_on, port_is_free

pytestmark = pytest.mark.e2e


def pids_of(info: dict, state_dir: Path) -> list[int]:
    pg = int((state_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
    return [info["pids"]["up"], pg, *info["pids"]["children"]]


async def exercise(info: dict, ports: dict[str, int]) -> None:
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    async with aiohttp.ClientSession() as http:
        for name in ("api", "stream", "projector"):  # up.json records each process's admin listener
            assert info["admin"][name] == f"http://127.0.0.1:{ports[name + '_admin_port']}"
            async with http.get(info["admin"][name] + "/readyz") as resp:
                assert resp.status == 200
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


async def served_again_after_killing_the_api(info: dict, state_dir: Path) -> float:
    """SIGKILL the api child; seconds until the partner gets 200 again."""
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    api_pid = info["pids"]["children"][1]
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
                killed = info["pids"]["children"][1]
                assert asyncio.run(served_again_after_killing_the_api(info, state_dir)) < 10
                assert run.proc.poll() is None
                info = run.info  # the state file names the restarted child
                assert info["pids"]["children"][1] != killed and alive(info["pids"]["children"][1])
            pids = pids_of(info, state_dir)
        finally:
            assert stop_up(run) == 0
        run.lines += run.proc.stdout.read().splitlines() if run.proc.stdout else []
        if attempt == 0:
            assert any("api exited" in line for line in run.lines) and any(
                "api restarted" in line for line in run.lines
            )
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
    run = start_up(state_dir, up_ports(), "--replicas", "1", "--no-trickle")
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
    finally:
        assert stop_up(run) == 0
    run.lines += run.proc.stdout.read().splitlines() if run.proc.stdout else []
    assert any("embedded PostgreSQL replica 1 restarted" in line for line in run.lines), run.lines[-10:]
    deadline = time.monotonic() + 10
    while alive(restarted) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(restarted)
    shutil.rmtree(state_dir)


def test_up_refuses_a_configured_database_with_the_memory_only_broker():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    env = up_env()
    env["TICKERWIRE_DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/nothing"
    ports = up_ports()
    result = subprocess.run(up_command(state_dir, ports), env=env, capture_output=True, text=True, timeout=60)
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
            assert runs[i].returncode != 0
            # stderr also has up's own log records (JSON lines); what it says to the user is one line.
            said = [line for line in err[i] if not line.startswith("{")]
            assert len(said) == 1 and said[0].startswith("tickerwire up: "), err[i]
        infos = [orjson.loads((dirs[i] / "up.json").read_bytes()) for i in up]
        listeners = [
            {
                "api": listener_port(info["base_url"]),
                "stream": listener_port(info["stream_url"]),
                **{f"{name}_admin": listener_port(url) for name, url in info["admin"].items()},
            }
            for info in infos
        ]
        if len(up) == 2:
            assert not set(listeners[0].values()) & set(listeners[1].values()), listeners
        for info, ports_of in zip(infos, listeners):  # each up's listeners are its own children's
            children = dict(zip(("projector", "api", "stream"), info["pids"]["children"]))
            for name, port in ports_of.items():
                assert listens_on(children[name.removesuffix("_admin")], port) is not False, (name, port)
            asyncio.run(exercise(info, {f"{k}_port": v for k, v in ports_of.items()}))
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
