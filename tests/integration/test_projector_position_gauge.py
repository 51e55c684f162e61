"""The position gauge reports the stored position; a redelivered batch never moves it back."""

from __future__ import annotations

from datetime import datetime, timezone

import asyncpg
from aiokafka import TopicPartition

from tickerwire.schemas.models import Workspace, WorkspaceEvent, encode_event
from tickerwire.services.common.config import Config
from tickerwire.services.common.db import create_pool, migrate
from tickerwire.services.projector.apply import Record
from tickerwire.services.projector.metrics import ProjectorMetrics
from tickerwire.services.projector.runner import Projector

NOW = datetime(2026, 11, 20, tzinfo=timezone.utc)


def record(offset: int) -> Record:
    event = WorkspaceEvent(version=1, emitted_at=NOW, data=Workspace(id=f"ws_{offset}", name="w", status="active"))
    return Record(offset, f"workspace:ws_{offset}".encode(), encode_event(event))


async def test_redelivered_records_leave_the_gauge_at_the_stored_position(fresh_db):
    conn = await asyncpg.connect(fresh_db)
    await migrate(conn, "rm")
    await conn.close()
    pool = await create_pool(fresh_db, "rm", min_size=1, max_size=2)
    metrics = ProjectorMetrics()
    projector = Projector(Config(database_url=fresh_db, kafka_bootstrap_servers="unused:9092"), pool, metrics)
    tp = TopicPartition("t.access.v1", 1)
    gauge = metrics.position.labels(tp.topic, str(tp.partition))
    try:
        await projector._apply(tp, [record(o) for o in range(5)])
        assert gauge._value.get() == 5
        await projector._apply(tp, [record(o) for o in range(2)])  # e.g. fetched from an older committed offset
        assert gauge._value.get() == 5
        assert metrics.redelivered._value.get() == 2
    finally:
        await pool.close()
