"""A post's stored trace context: the W3C ``traceparent`` and ``tracestate`` of the projector's
span that wrote its current version (columns of ``posts``), for the stream and the dispatcher to
continue that trace (``tracing.extract(context.headers())``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..common.db import Queryable


@dataclass(frozen=True, slots=True)
class PostTraceContext:
    traceparent: str
    tracestate: str = ""

    def headers(self) -> dict[str, str]:
        """As HTTP headers, what ``Tracing.extract`` reads."""
        if self.tracestate:
            return {"traceparent": self.traceparent, "tracestate": self.tracestate}
        return {"traceparent": self.traceparent}


SELECT_POST_TRACES = """
SELECT id, trace_parent, trace_state FROM posts WHERE id = ANY($1::bigint[]) AND trace_parent IS NOT NULL
"""


async def post_trace_contexts(conn: Queryable, post_ids: Iterable[int]) -> dict[int, PostTraceContext]:
    """The stored context of each of ``post_ids`` that has one (posts without are absent)."""
    rows = await conn.fetch(SELECT_POST_TRACES, sorted(set(post_ids)))
    return {r["id"]: PostTraceContext(r["trace_parent"], r["trace_state"] or "") for r in rows}


async def post_trace_context(conn: Queryable, post_id: int) -> PostTraceContext | None:
    """The stored context of one post, or None (no such post, or none stored)."""
    return (await post_trace_contexts(conn, [post_id])).get(post_id)
