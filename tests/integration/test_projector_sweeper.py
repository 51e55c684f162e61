"""The badge sweeper (docs/api.md#badge-status) against the real PostgreSQL: boundaries, and status moves only at ticks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.support.events import embed_ev, heartbeat_ev, records, workspace_ev
from tickerwire.services.projector.apply import apply_batch
from tickerwire.services.projector.sweeper import sweep_once


async def test_sweep_once_maps_the_last_heartbeat_to_ok_warning_missing_unknown(conn):
    now = datetime.now(timezone.utc)
    ages = {"ws_ok": timedelta(hours=47), "ws_warn": timedelta(hours=49), "ws_missing": timedelta(hours=73)}
    events = [workspace_ev(ws) for ws in (*ages, "ws_none", "ws_stranger")]
    for ws, age in ages.items():
        events += [
            embed_ev(f"bdg_{ws.replace('_', '')}", ws),
            heartbeat_ev(f"bdg_{ws.replace('_', '')}", ws, now - age),
        ]
    # The newest heartbeat of any embed counts; an older one of a second embed does not hold it back.
    events += [embed_ev("bdg_okold", "ws_ok"), heartbeat_ev("bdg_okold", "ws_ok", now - timedelta(hours=100))]
    # A heartbeat naming a workspace that does not own the embed does not count for it.
    events += [embed_ev("bdg_other", "ws_warn"), heartbeat_ev("bdg_other", "ws_stranger", now)]
    await apply_batch(conn, "t.access.v1", 0, records(events))

    assert await conn.fetchval("SELECT badge_status FROM workspaces WHERE id = 'ws_ok'") == "unknown"  # no tick yet
    assert await sweep_once(conn) == {
        "ws_ok": "ok",
        "ws_warn": "warning",
        "ws_missing": "missing",
        "ws_none": "unknown",
        "ws_stranger": "unknown",
    }

    # A fresh heartbeat changes nothing until the next tick, which then reports ok.
    await apply_batch(
        conn, "t.access.v1", 0, records([heartbeat_ev("bdg_wsmissing", "ws_missing", now)], start=len(events))
    )
    assert await conn.fetchval("SELECT badge_status FROM workspaces WHERE id = 'ws_missing'") == "missing"
    assert (await sweep_once(conn))["ws_missing"] == "ok"
