"""Every Kafka consumer is stopped when it is dropped: a consumer object that is garbage-collected
unstopped makes aiokafka report ``Unclosed AIOKafkaConsumer`` through the event loop's exception
handler, an ERROR line seconds later that names no cause. The log probe (the second consumer of
the projector and of the stream's feed) starts its consumer on first use; a start the broker
refuses (an outage) leaves nothing unstopped behind. A real aiokafka consumer against a port
that refuses connections."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
from typing import Any, Iterator

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.kafka.logcheck import LogProbe


def config(bootstrap: str) -> FullConfig:
    return FullConfig(database_url="postgresql://unused/unused", kafka_bootstrap_servers=bootstrap)


@contextlib.contextmanager
def unclosed_reports() -> Iterator[list[dict[str, Any]]]:
    """What the loop's exception handler is told about unclosed consumers, collected at the end."""
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(
        lambda loop, context: (
            reports.append(context)
            if "Unclosed AIOKafkaConsumer" in context.get("message", "")
            else loop.default_exception_handler(context)
        )
    )
    try:
        yield reports
        gc.collect()  # the consumer sits in reference cycles: only a collection finalizes it
    finally:
        loop.set_exception_handler(previous)


async def test_a_probe_whose_broker_refuses_leaves_no_unstopped_consumer():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        probe = LogProbe(config(f"127.0.0.1:{s.getsockname()[1]}"), "test-probe")
        with unclosed_reports() as reports:
            with pytest.raises(KafkaError):
                await probe.held({TopicPartition("t", 0): 0})
            await probe.close()
    assert reports == []


async def test_two_checks_at_once_start_one_probe_consumer_and_drop_none(kafka_bootstrap):
    """The projector checks the log from its loop and from its rebalance listener (on every
    assignment, so right after each restart); both asked the probe at once, both started a
    consumer, and the second replaced the first unstopped: ``Unclosed AIOKafkaConsumer``
    ~0.1 s after "assigned and seeked" on 2 of 3 restarts under ``tickerwire up``."""
    probe = LogProbe(config(kafka_bootstrap), "test-probe")
    with unclosed_reports() as reports:
        tp = TopicPartition("test-probe-nosuchtopic", 0)
        await asyncio.gather(*(probe.held({tp: 0}, timeout_s=0.2) for _ in range(3)))
        await probe.close()
    assert reports == []
