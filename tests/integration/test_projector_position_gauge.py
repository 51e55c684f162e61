"""The position gauge reports the stored position; a redelivered batch never moves it back."""

from __future__ import annotations

from datetime import datetime, timezone

from aiokafka import TopicPartition

from tests.support.projector import projector_on
from tickerwire.schemas.models import Workspace, WorkspaceEvent, encode_event
from tickerwire.services.projector.apply import ConsumedRecord

NOW = datetime(2026, 11, 20, tzinfo=timezone.utc)


def exported(metrics, name: str, **labels: str) -> float | None:
    """A sample as the projector exports it (through its registry)."""
    return metrics.registry.get_sample_value(name, labels)


def record(offset: int) -> ConsumedRecord:
    event = WorkspaceEvent(version=1, emitted_at=NOW, data=Workspace(id=f"ws_{offset}", name="w", status="active"))
    return ConsumedRecord(offset, f"workspace:ws_{offset}".encode(), encode_event(event))


async def test_redelivered_records_leave_the_gauge_at_the_stored_position(fresh_db):
    async with projector_on(fresh_db) as (projector, pool, metrics):
        tp = TopicPartition("t.access.v1", 1)
        await projector.apply_records(tp, [record(o) for o in range(5)])
        assert exported(metrics, "tickerwire_projector_position", topic=tp.topic, partition=str(tp.partition)) == 5
        await projector.apply_records(tp, [record(o) for o in range(2)])  # e.g. fetched from an older committed offset
        assert exported(metrics, "tickerwire_projector_position", topic=tp.topic, partition=str(tp.partition)) == 5
        assert exported(metrics, "tickerwire_projector_records_redelivered_total") == 2
