"""Publishing as other teams' producers do, records given raw: librdkafka (the ``confluent-kafka``
package, the client behind most non-Java producers) with its ordinary settings, Kafka's own Java
producer (kafka-clients) and KafkaJS (tests/compat/producers/); and which producers the broker
keeps for a topic's partitions (:func:`active_producers`)."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tests.support.javatools import compiled
from tickerwire.devstack.embedded import kafka_jars
from tickerwire.devstack.embedded.jdk import java


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


#: The foreign producers' programs (tests/compat/producers/).
_PROGRAMS = Path(__file__).parents[1] / "compat" / "producers"


def _lines(records: Sequence[Raw]) -> bytes:
    """KEY<TAB>VALUE lines for the foreign producers (keys are text; values one line of JSON)."""
    for r in records:
        assert r.key is not None and r.value is not None and b"\n" not in r.value and b"\t" not in r.key
    return b"".join(r.key + b"\t" + r.value + b"\n" for r in records)  # type: ignore[operator]


async def java_producer(
    bootstrap: str, topic: str, records: Sequence[Raw], mode: str = "plain", codec: str = "none"
) -> None:
    """Publish with Kafka's own Java producer (kafka-clients, from the broker's classpath) and its
    defaults (idempotent, acks=all); ``mode`` plain, commit or abort (one transaction)."""
    classpath = kafka_jars.classpath()
    classes = await asyncio.to_thread(compiled, _PROGRAMS / "Publish.java", classpath)
    argv = [java(), "-cp", f"{classpath}{os.pathsep}{classes}", "Publish"]
    await _run(argv + [bootstrap, topic, mode, codec], _lines(records), "Kafka's Java producer")


async def active_producers(bootstrap: str, topic: str, partitions: int) -> dict[int, set[int]]:
    """The producer ids the broker keeps for each of ``topic``'s first ``partitions`` partitions
    (Kafka's Admin client, DescribeProducers): only an idempotent or transactional producer's
    records leave one. On the JDK of the wheel, as :func:`java_producer` is."""
    classpath = kafka_jars.classpath()
    classes = await asyncio.to_thread(compiled, _PROGRAMS / "Producers.java", classpath)
    argv = [java(), "-cp", f"{classpath}{os.pathsep}{classes}", "Producers"]
    out = await _run(argv + [bootstrap, topic, str(partitions)], b"", "Kafka's Admin client", said=b"")
    found: dict[int, set[int]] = {}
    for line in out.decode().splitlines():
        partition, producer_id, _ = line.split("\t")
        found.setdefault(int(partition), set()).add(int(producer_id))
    return found


def kafkajs_unavailable() -> str | None:
    """Why KafkaJS cannot run here, or None."""
    from tests.support.fieldtools import node_tools

    if shutil.which("node") is None:
        return "node is not installed"
    if not (node_tools() / "node_modules" / "kafkajs" / "package.json").exists():
        return f"npm package kafkajs is not installed in {node_tools()} (.ci/run installs it)"
    return None


async def kafkajs(
    bootstrap: str, topic: str, records: Sequence[Raw], mode: str = "idempotent", codec: str = "none"
) -> None:
    """Publish with KafkaJS: ``mode`` idempotent, commit or abort (one transaction)."""
    from tests.support.fieldtools import node_tools

    env = {**os.environ, "TICKERWIRE_NODE_MODULES": str(node_tools() / "node_modules")}
    argv = ["node", str(_PROGRAMS / "publish.mjs"), bootstrap, topic, mode, codec]
    await _run(argv, _lines(records), "KafkaJS", env)


async def _run(
    argv: list[str], stdin: bytes, who: str, env: dict[str, str] | None = None, said: bytes = b"delivered"
) -> bytes:
    """Run a program to its end (at most 120 s); its output, which must hold ``said``."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(stdin), timeout=120)
    except TimeoutError:
        proc.kill()
        raise AssertionError(f"{who} did not finish within 120 s") from None
    assert proc.returncode == 0 and said in out, f"{who} failed ({proc.returncode}): {out.decode()[-2000:]}"
    return out
