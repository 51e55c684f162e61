"""Publishing as other teams' producers do: librdkafka (the ``confluent-kafka`` package, the
client behind most non-Java producers) with its ordinary settings, records given raw."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True, slots=True)
class Raw:
    """One record as a producer sends it: ``partition`` None lets the producer's partitioner choose."""

    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes]] = ()


def _produce(
    bootstrap: str, topic: str, records: Sequence[Raw], settings: dict[str, Any], transaction: str | None
) -> list[tuple[int, int]]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, **settings})
    delivered: list[tuple[int, int]] = []
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset()))

    if transaction is not None:
        producer.init_transactions(30)
        producer.begin_transaction()
    for r in records:
        kw: dict[str, Any] = {"value": r.value, "key": r.key, "headers": list(r.headers), "on_delivery": on_delivery}
        if r.partition is not None:
            kw["partition"] = r.partition
        producer.produce(topic, **kw)
    if transaction == "commit":
        producer.commit_transaction(30)
    elif transaction == "abort":
        producer.flush(30)
        producer.abort_transaction(30)
    left = producer.flush(30)
    assert left == 0 and not errors, f"librdkafka did not deliver {left} records: {errors}"
    return delivered


async def librdkafka(
    bootstrap: str,
    topic: str,
    records: Sequence[Raw],
    *,
    transaction: str | None = None,
    **settings: Any,
) -> list[tuple[int, int]]:
    """Produce ``records`` to ``topic`` with librdkafka (``settings``: its configuration, e.g.
    ``**{"compression.type": "zstd"}``), in one transaction committed or aborted when
    ``transaction`` says so (``settings`` then needs a ``transactional.id``). Returns the
    (partition, offset) of each record delivered."""
    return await asyncio.to_thread(_produce, bootstrap, topic, records, settings, transaction)
