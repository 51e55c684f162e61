"""`tickerwire up --replicas 1`: an embedded streaming replica the API reads from, restarted
by `up` when it dies, back in the read rotation by itself, and stopped with everything else."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support.faults import alive, start_up, stop_up, up_ports, wait_up

pytestmark = pytest.mark.e2e


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
        async with http.get(info["base_url"] + "/posts", headers={"Authorization": f"Bearer {info['api_key']}"}) as resp:
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
