"""The dispatcher's spans (tracing on): each attempt a CLIENT span ``POST webhook``, child of its
post's stored trace context (:mod:`..readmodel.post_traces`, read once per walked page; a test
event starts a trace of its own), whose ``traceparent`` goes to the receiver as a header. The
body is not touched: the stored bytes of a message are what every attempt sends
(docs/webhooks.md#one-id-one-body), the trace context travels beside them."""

from __future__ import annotations

import logging
from typing import Iterable
from urllib.parse import urlsplit

import orjson

from ..common.db import Queryable, storage_errors
from ..common.runtime.errors import TransientError
from ..common.tracing import ROOT, Kind, Parent, Tracing
from ..readmodel.announcements import Announcement
from ..readmodel.post_traces import post_trace_contexts
from .metrics import WebhookMetrics
from .schedule import AttemptResult
from .sender import Sender

log = logging.getLogger(__name__)

SPAN = "POST webhook"


def post_id(item: Announcement) -> int:
    """The id of the post an announcement shows (its partner JSON's ``id``)."""
    return int(orjson.loads(item.lean)["id"])


async def page_parents(tracing: Tracing, db: Queryable, items: Iterable[Announcement]) -> dict[int, Parent]:
    """The stored trace context of the posts of ``items``, by post id, in one read; posts
    without one (or every post, when the read fails: tracing never holds up a delivery) absent."""
    try:
        with storage_errors("post trace contexts"):
            stored = await post_trace_contexts(db, {post_id(item) for item in items})
    except TransientError as exc:
        log.warning("webhooks: delivering without the posts' trace contexts (%s)", exc)
        return {}
    parents = {}
    for pid, context in stored.items():
        if (parent := tracing.extract(context.headers())) is not None:
            parents[pid] = parent
    return parents


async def traced_attempt(
    tracing: Tracing,
    sender: Sender,
    metrics: WebhookMetrics,
    endpoint_id: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    parent: Parent = ROOT,
) -> AttemptResult:
    """One attempt under its CLIENT span (``traceparent`` added to ``headers``), counted and
    observed (:meth:`.metrics.WebhookMetrics.attempted`) with the trace as the latency's exemplar."""
    target = urlsplit(url)
    attributes = {
        "http.request.method": "POST",
        "server.address": target.hostname or "",
        "server.port": target.port or (443 if target.scheme == "https" else 80),
        "tickerwire.webhook.endpoint_id": endpoint_id,
        "tickerwire.webhook.id": headers.get("webhook-id", ""),
    }
    with tracing.start(SPAN, Kind.CLIENT, parent, (), attributes) as span:
        tracing.inject(headers)
        result = await sender.attempt(url, headers, body)
        if result.status is not None:
            span.set_attribute("http.response.status_code", result.status)
        if result.outcome != "delivered":
            span.set_attribute("error.type", str(result.status) if result.status is not None else result.outcome)
            span.fail(result.error or result.outcome)
        metrics.attempted(result, tracing.exemplar())
    return result
