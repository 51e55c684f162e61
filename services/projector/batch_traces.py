"""The spans of one partition's fetched batch, and the trace context each post keeps.

Per batch a CONSUMER span ``process <topic>`` (a trace of its own) links every record's
creation context (its ``traceparent`` header); per record that maps to a post an INTERNAL span
``project post.created`` (the post had no row yet) or ``project post.updated``, whose parent is
the record's context (a new trace when the record has none). The context of the span that wrote
a post's current version is stored on its row (``trace_parent``, ``trace_state``), in the
batch's transaction, for the stream and the dispatcher (:mod:`..readmodel.post_traces`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

import asyncpg
import orjson
from aiokafka import TopicPartition

from tickerwire.schemas.models import unframe

from ..common.db import begin_local
from ..common.tracing import ROOT, Kind, Parent, Span, Tracing
from .apply import BatchResult, ConsumedRecord


@dataclass(frozen=True, slots=True)
class TracedRecord(ConsumedRecord):
    """A consumed record with its headers (where its creation context travels)."""

    headers: Sequence[tuple[str, bytes]] = ()


def consumed(message: Any) -> ConsumedRecord:
    """The projector's copy of a consumer record; its headers kept when it has any."""
    if message.headers:
        return TracedRecord(message.offset, message.key, message.value, None, message.headers)
    return ConsumedRecord(message.offset, message.key, message.value)


SELECT_EXISTING_POSTS = "SELECT id FROM posts WHERE id = ANY($1::bigint[])"
STORE_POST_TRACES = """
UPDATE posts SET trace_parent = t.parent, trace_state = t.state
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS t(id, version, parent, state)
WHERE posts.id = t.id AND posts.version = t.version
"""


@dataclass(frozen=True, slots=True)
class PostRecord:
    offset: int
    post_id: int
    version: int


def post_of(record: ConsumedRecord) -> PostRecord | None:
    """The post a record's event writes (id, version), or None: another entity, or not decodable
    (the apply sets that one aside)."""
    if record.fault is not None or record.value is None:
        return None
    try:
        event = orjson.loads(unframe(record.value)[1])
        if event.get("type") != "post":
            return None
        return PostRecord(record.offset, int(event["data"]["id"]), int(event["version"]))
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return None


class BatchTrace:
    """The spans of one batch; :meth:`write` applies it with the posts' contexts, :meth:`end` ends them."""

    def __init__(self, tracing: Tracing, tp: TopicPartition, records: list[ConsumedRecord]) -> None:
        self.tracing = tracing
        self.parents: dict[int, Parent] = {}
        for record in records:
            if isinstance(record, TracedRecord) and (parent := tracing.extract(record.headers)) is not None:
                self.parents[record.offset] = parent
        attributes = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": tp.topic,
            "messaging.destination.partition.id": str(tp.partition),
            "messaging.batch.message_count": len(records),
        }
        self.batch = tracing.span(
            f"process {tp.topic}", Kind.CONSUMER, parent=ROOT, links=list(self.parents.values()), attributes=attributes
        )
        self.posts: dict[int, PostRecord] = {}
        #: The ``project`` span of each post record, by offset (opened at its first write).
        self.spans: dict[int, Span] = {}

    def vetted(self, records: list[ConsumedRecord]) -> None:
        """The records as they will be applied: those that map to a post."""
        self.posts = {p.offset: p for p in map(post_of, records) if p is not None}

    async def write(
        self, conn: asyncpg.Connection, records: list[ConsumedRecord], apply: Callable[[], Awaitable[BatchResult]]
    ) -> BatchResult:
        """``apply()`` (the batch's transaction, nested in this one), then the context of each post
        it wrote, committed together."""
        mine = [self.posts[r.offset] for r in records if r.offset in self.posts]
        if not mine:
            return await apply()
        async with conn.transaction():
            await begin_local(conn)
            if any(p.offset not in self.spans for p in mine):
                existing = {r["id"] for r in await conn.fetch(SELECT_EXISTING_POSTS, sorted({p.post_id for p in mine}))}
                self._open(mine, existing)
            result = await apply()
            # Records below the stored position (redelivered) were skipped: a prefix of the batch.
            applied = {r.offset for r in records[result.skipped_redelivered :]}
            fresh = [p for p in mine if p.offset in applied]
            if fresh:
                await conn.execute(STORE_POST_TRACES, *self._columns(fresh))
        return result

    def _open(self, posts: list[PostRecord], existing: set[int]) -> None:
        seen = set(existing)
        for p in posts:
            if p.offset in self.spans:
                continue
            what = "post.updated" if p.post_id in seen else "post.created"
            seen.add(p.post_id)
            self.spans[p.offset] = self.tracing.span(
                f"project {what}",
                Kind.INTERNAL,
                parent=self.parents.get(p.offset, ROOT),
                attributes={"tickerwire.post.id": p.post_id, "messaging.kafka.offset": p.offset},
            )

    def _columns(self, fresh: list[PostRecord]) -> tuple[list, list, list, list]:
        """Per post, the context of its highest version's first record (the one a replay keeps)."""
        best: dict[int, PostRecord] = {}
        for p in fresh:
            if p.post_id not in best or p.version > best[p.post_id].version:
                best[p.post_id] = p
        ids, versions, parents, states = [], [], [], []
        for p in best.values():
            headers: dict[str, str] = {}
            self.tracing.inject(headers, self.spans[p.offset])
            ids.append(p.post_id)
            versions.append(p.version)
            parents.append(headers.get("traceparent"))
            states.append(headers.get("tracestate"))
        return ids, versions, parents, states

    def end(self, error: BaseException | None = None) -> None:
        for span in [*self.spans.values(), self.batch]:
            if error is not None:
                span.record_error(error)
            span.end()
