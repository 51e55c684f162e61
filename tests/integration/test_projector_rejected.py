"""A record the read model's constraints refuse is set aside; the rest of its batch is applied."""

from __future__ import annotations

from datetime import datetime, timezone

from aiokafka import TopicPartition

from tests.support.projector import projector_on
from tickerwire.schemas.models import ApiKey, ApiKeyEvent, Workspace, WorkspaceEvent, encode_event
from tickerwire.services.projector.apply import ConsumedRecord

NOW = datetime(2026, 11, 20, tzinfo=timezone.utc)
HASH = "ab" * 32


def key_event(key_id: str) -> bytes:
    return encode_event(
        ApiKeyEvent(
            version=1,
            emitted_at=NOW,
            data=ApiKey(id=key_id, workspace_id="ws_1", key_hash=HASH, display_prefix="tw_live_abcd", issued_at=NOW),
        )
    )


def workspace_event(ws_id: str) -> bytes:
    return encode_event(
        WorkspaceEvent(version=1, emitted_at=NOW, data=Workspace(id=ws_id, name=ws_id, status="active"))
    )


async def test_constraint_violation_is_dead_lettered_and_the_batch_moves_on(fresh_db):
    async with projector_on(fresh_db) as (projector, pool, metrics):
        tp = TopicPartition("t.access.v1", 0)
        records = [
            ConsumedRecord(0, b"workspace:ws_1", workspace_event("ws_1")),
            ConsumedRecord(1, b"api_key:key_a", key_event("key_a")),
            ConsumedRecord(2, b"api_key:key_b", key_event("key_b")),  # same hash as key_a: violates UNIQUE(key_hash)
            ConsumedRecord(3, b"workspace:ws_2", workspace_event("ws_2")),
        ]
        await projector.apply_records(tp, records)
        assert {r["id"] for r in await pool.fetch("SELECT id FROM workspaces")} == {"ws_1", "ws_2"}
        assert [r["id"] for r in await pool.fetch("SELECT id FROM api_keys")] == ["key_a"]
        dead = await pool.fetch('SELECT "offset", reason_kind, reason, value FROM dead_letters')
        assert [(d["offset"], d["reason_kind"]) for d in dead] == [(2, "rejected")]
        assert "UniqueViolation" in dead[0]["reason"] and dead[0]["value"] == records[2].value
        assert await pool.fetchval("SELECT next_offset FROM positions WHERE topic = $1", tp.topic) == 4
        assert (
            metrics.registry.get_sample_value("tickerwire_projector_dead_lettered_total", {"reason": "rejected"}) == 1
        )
        await projector.apply_records(tp, records)  # redelivery changes nothing
        assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 1
