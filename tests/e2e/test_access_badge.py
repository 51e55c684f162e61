"""The badge state machine (docs/api.md#badge-status) end to end: heartbeat events on the log, ticks of the
real ``tickerwire sweep`` command, and what two API processes then serve."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone

import aiohttp
import orjson
import pytest

from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tickerwire.services.cli import admin

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, "access-badge", services=("projector", "api", "api")) as s:
        yield s


def sweep_cli(stack: ServiceStack) -> dict[str, str]:
    """One tick through the console command, as an operator (or cron) would run it."""
    with tempfile.TemporaryDirectory() as cwd:  # no stray .tickerwire/up.json
        done = subprocess.run(
            [sys.executable, "-m", "tickerwire.services.cli.main", "sweep"],
            env=stack.env(),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    return dict(line.split("\t") for line in done.stdout.splitlines() if line)


async def swept(stack: ServiceStack) -> dict[str, str]:
    """A tick through the command, then every API process applies it within 1 s (or the test fails)."""
    statuses = sweep_cli(stack)
    await stack.access_applied()
    return statuses


async def answers(stack: ServiceStack, key: str) -> list[tuple[int, str | None]]:
    """(status, error code) from every API process."""
    out = []
    async with aiohttp.ClientSession() as http:
        for api in stack.of("api"):
            async with http.get(f"{api.url}{BASE}/languages", headers=auth(key)) as resp:
                body = orjson.loads(await resp.read())
                out.append((resp.status, body["error"]["code"] if resp.status >= 400 else None))
                if resp.status == 403:
                    assert "re-paste the snippet" in body["error"]["message"]  # the recovery steps
    return out


SERVED = [(200, None), (200, None)]
REFUSED = [(403, "BADGE_MISSING"), (403, "BADGE_MISSING")]


async def test_heartbeat_age_decides_the_badge_at_each_tick_and_a_fresh_one_restores_service(stack):
    now = datetime.now(timezone.utc)
    ages = {"bdgok": 47, "bdgwarn": 49, "bdgmissing": 73, "bdgnone": None}
    conn = await stack.read_conn()
    try:
        events, keys = [], {}
        for ws, hours in ages.items():
            events.append(await admin.workspace_event(conn, ws, create=True))
            key, key_event = admin.issue_key(ws)
            keys[ws] = key
            events += [key_event, admin.embed_event(f"bdg_{ws}", ws)]
            if hours is not None:
                events.append(admin.heartbeat_event(f"bdg_{ws}", ws, now - timedelta(hours=hours)))
    finally:
        await conn.close()
    await stack.publish(events)
    await stack.wait_projected()

    # Before any tick has seen them, every workspace is unknown: refused, however fresh its heartbeat.
    for ws in ages:
        assert await answers(stack, keys[ws]) == REFUSED, ws

    statuses = await swept(stack)
    assert {ws: statuses[ws] for ws in ages} == {
        "bdgok": "ok",
        "bdgwarn": "warning",
        "bdgmissing": "missing",
        "bdgnone": "unknown",
    }
    assert await answers(stack, keys["bdgok"]) == SERVED
    assert await answers(stack, keys["bdgwarn"]) == SERVED  # grace period
    assert await answers(stack, keys["bdgmissing"]) == REFUSED
    assert await answers(stack, keys["bdgnone"]) == REFUSED

    # A heartbeat lands for the missing and the never-seen workspace: nothing changes until the next tick...
    await stack.publish(
        [
            admin.heartbeat_event("bdg_bdgmissing", "bdgmissing"),
            admin.heartbeat_event("bdg_bdgnone", "bdgnone"),
        ]
    )
    await stack.wait_projected()
    assert await answers(stack, keys["bdgmissing"]) == REFUSED
    assert await answers(stack, keys["bdgnone"]) == REFUSED

    # ...and serving resumes right after it.
    statuses = await swept(stack)
    assert (statuses["bdgmissing"], statuses["bdgnone"]) == ("ok", "ok")
    assert await answers(stack, keys["bdgmissing"]) == SERVED
    assert await answers(stack, keys["bdgnone"]) == SERVED


async def test_a_heartbeat_of_another_workspaces_embed_does_not_count(stack):
    conn = await stack.read_conn()
    try:
        ws_event = await admin.workspace_event(conn, "bdgforeign", create=True)
    finally:
        await conn.close()
    key, key_event = admin.issue_key("bdgforeign")
    # The embed belongs to bdgok; a heartbeat claiming bdgforeign through it proves nothing.
    await stack.publish(
        [
            ws_event,
            key_event,
            admin.embed_event("bdg_bdgforeign", "bdgforeign"),
            admin.heartbeat_event("bdg_bdgok", "bdgforeign"),
        ]
    )
    await stack.wait_projected()
    assert (await swept(stack))["bdgforeign"] == "unknown"
    assert await answers(stack, key) == REFUSED
