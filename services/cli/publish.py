"""Publishing validated events to the log: the only way platform teams change the read model."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from typing import Iterable, Sequence, TextIO

from aiokafka import AIOKafkaProducer

from tickerwire.schemas.models import InvalidEvent, decode_event, encode_event, entity_key, topic_for_event_type

from ..common import tracing as traces
from ..common.kafka import ensure_declared_before, send_traced, started_producer
from ..common.runtime.config import Config
from .running import cli_config, fail, run_admin


@dataclass(frozen=True, slots=True)
class LineError:
    line: int
    reason: str


def parse_lines(lines: Iterable[str]) -> tuple[list, list[LineError]]:
    """Validate JSON lines (blank lines skipped). Returns the events and every invalid line."""
    events = []
    errors: list[LineError] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(decode_event(line.encode("utf-8", "surrogateescape")))
        except InvalidEvent as exc:
            errors.append(LineError(number, exc.reason))
    return events, errors


TopicMarks = dict[tuple[str, int], int]
#: Longest ``tickerwire publish`` waits, once done, for its spans to be exported.
PUBLISH_SPANS_TIMEOUT_S = 2.0


async def send_events(
    producer: AIOKafkaProducer,
    prefix: str,
    events: Sequence,
    *,
    tracing: traces.Tracing = traces.OFF,
    headers: Sequence[tuple[str, bytes]] = (),
) -> TopicMarks:
    """Send every event keyed by its entity and wait until the broker has them all; each record
    under its ``send <topic>`` span (:func:`..common.kafka.send_traced`), with ``headers`` (a
    ``traceparent`` among them is the spans' parent).

    Returns, per (topic, partition), the offset after the last record written there."""
    futures = []
    for event in events:
        futures.append(
            await send_traced(
                producer,
                topic_for_event_type(prefix, event.type),
                encode_event(event),
                entity_key(event).encode(),
                headers=headers,
                tracing=tracing,
            )
        )
    await producer.flush()
    marks: TopicMarks = {}
    for meta in await asyncio.gather(*futures):
        key = (meta.topic, meta.partition)
        marks[key] = max(marks.get(key, 0), meta.offset + 1)
    return marks


async def publish(config: Config, events: Sequence, tracing: traces.Tracing = traces.OFF) -> TopicMarks:
    async with started_producer(config) as producer:
        return await send_events(producer, config.topic_prefix, events, tracing=tracing)


async def publish_declared(config: Config, events: Sequence, tracing: traces.Tracing = traces.OFF) -> TopicMarks:
    """What a command publishes: the declared topics are created first where missing
    (:func:`..common.kafka.ensure_declared_before`), so the broker never creates ours on demand."""
    await ensure_declared_before(config, "publishing")
    return await publish(config, events, tracing)


def read_source(path: str, stdin: TextIO) -> list[str]:
    if path == "-":
        return stdin.read().splitlines()
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read().splitlines()


def cmd_publish(args: argparse.Namespace) -> int:
    try:
        lines = read_source(args.file, sys.stdin)
    except OSError as exc:
        return fail("publish", f"cannot read {args.file}: {exc.strerror}", 2)
    events, errors = parse_lines(lines)
    if errors:
        for err in errors:
            print(f"{args.file}:{err.line}: {err.reason}", file=sys.stderr)
        return fail("publish", f"{len(errors)} invalid event(s); nothing was published", 1)

    async def go() -> int:
        config = cli_config()
        tracing = traces.from_env(os.environ, "tickerwire-publish")
        try:
            await publish_declared(config, events, tracing)
        finally:  # the spans of what was sent are exported before the command exits (bounded)
            await asyncio.to_thread(tracing.shutdown, PUBLISH_SPANS_TIMEOUT_S)
        print(f"published {len(events)} event(s)")
        return 0

    return run_admin("publish", go())


def register(sub) -> None:
    pub = sub.add_parser("publish", help="validate JSON-lines events and publish them (all or nothing)")
    pub.add_argument("file", help="a JSON-lines file, or - for standard input")
    pub.set_defaults(func=cmd_publish)
