"""`tickerwire up` as a user runs it: it comes up, serves, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from tickerwire.services.embedded.ports import free_port, port_is_free

pytestmark = pytest.mark.e2e


def start_up(state_dir: Path, ports: dict[str, int]) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKERWIRE_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tickerwire.services.cli.main", "up", "--state-dir", str(state_dir),
         "--posts", "60", "--tokens", "120", "--trickle-interval", "1",
         *[arg for name, port in ports.items() for arg in (f"--{name.replace('_', '-')}", str(port))]],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )


def wait_up(proc: subprocess.Popen, timeout: float = 120) -> list[str]:
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"up exited early with {proc.wait()}: {lines}")
        lines.append(line)
        if line.startswith("Ctrl-C stops everything"):
            return lines
    raise AssertionError("up did not come up in time")


def pids_of(info: dict, state_dir: Path) -> list[int]:
    pg = int((state_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
    return [info["pids"]["up"], pg, *info["pids"]["children"]]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.split(")")[-1].split()[0] != "Z"


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
        async with http.ws_connect(info["stream_url"]) as ws:
            assert orjson.loads((await ws.receive(timeout=10)).data)["type"] == "ready"
            kinds = set()
            for _ in range(20):
                kinds.add(orjson.loads((await ws.receive(timeout=10)).data)["type"])
                if "post.created" in kinds:
                    break
            assert "post.created" in kinds


def test_up_serves_and_ctrl_c_leaves_nothing_behind():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-"))
    ports = {name: free_port() for name in ("api_port", "stream_port", "api_admin_port", "stream_admin_port", "projector_admin_port")}
    for attempt in range(2):  # the second run proves a restart starts cleanly
        proc = start_up(state_dir, ports)
        try:
            lines = wait_up(proc)
            assert any("API key:" in line for line in lines)
            info = orjson.loads((state_dir / "up.json").read_bytes())
            pids = pids_of(info, state_dir)
            asyncio.run(exercise(info, ports))
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in pids if alive(p)], f"run {attempt}: processes left behind"
        held = [p for p in [*ports.values(), int(info["database_url"].split(":")[-1].split("/")[0]),
                            int(info["kafka_bootstrap_servers"].rsplit(":", 1)[1])] if not port_is_free(p)]
        assert not held, f"run {attempt}: ports still held: {held}"
        assert not (state_dir / "up.json").exists()
