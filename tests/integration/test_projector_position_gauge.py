"""The position gauge reports the stored position; a redelivered batch never moves it back."""

from __future__ import annotations

from datetime import datetime, timezone

from aiokafka import TopicPartition

from tickerwire.schemas.models import Workspace, WorkspaceEvent, encode_event
from tickerwire.services.projector.apply import Record
from tests.support.projector import projector_on

NOW = datetime(2026, 11, 20, tzinfo=timezone.utc)


def record(offset: int) -> Record:
    event = WorkspaceEvent(version=1, emitted_at=NOW, data=Workspace(id=f"ws_{offset}", name="w", status="active"))
    return Record(offset, f"workspace:ws_{offset}".encode(), encode_event(event))


async def test_redelivered_records_leave_the_gauge_at_the_stored_position(fresh_db):
    async with projector_on(fresh_db) as (projector, pool, metrics):
        tp = TopicPartition("t.access.v1", 1)
        gauge = metrics.position.labels(tp.topic, str(tp.partition))
        await projector.apply_records(tp, [record(o) for o in range(5)])
        assert gauge._value.get() == 5
        await projector.apply_records(tp, [record(o) for o in range(2)])  # e.g. fetched from an older committed offset
        assert gauge._value.get() == 5
        assert metrics.redelivered._value.get() == 2
