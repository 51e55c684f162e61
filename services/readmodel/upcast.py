"""Upcasting: every version of an event lifted to the one shape the projector maps.

Pure code, no I/O. A version 1 post event becomes the version 2 event a publisher of version
2 would have sent for the same post (each ticker with relevance 1, a ticker named twice once,
``source`` from ``source_url`` and ``byline``, no ``updated_at``), so the mapping, the rows and the partner
JSON know one shape (schemas/README.md#versions). A later version adds one step to the chain
here (v1 → v2 → v3); the other event types have one version and pass through.
"""

from __future__ import annotations

from typing import Union

import orjson

from tickerwire.schemas.models import (
    AnyEvent,
    ApiKeyEvent,
    CategoryEvent,
    EmbedEvent,
    HeartbeatEvent,
    LocaleEvent,
    Post,
    PostEvent,
    PostEventV2,
    PostTranslationV2,
    PostV2,
    Source,
    TickerMention,
    TokenEvent,
    WebhookEndpointEvent,
    WorkspaceEvent,
)

#: An event as the projector maps it: each type in its current version.
ProjectedEvent = Union[
    PostEventV2,
    TokenEvent,
    CategoryEvent,
    LocaleEvent,
    WorkspaceEvent,
    ApiKeyEvent,
    EmbedEvent,
    HeartbeatEvent,
    WebhookEndpointEvent,
]

#: The relevance of a ticker a version 1 event names: it named only the tickers a post is about.
V1_RELEVANCE = 1.0


def post_v2(post: Post) -> PostV2:
    """The version 2 snapshot of a version 1 post (already valid: nothing is validated again)."""
    return PostV2.model_construct(
        id=post.id,
        status=post.status,
        published_at=post.published_at,
        updated_at=None,
        importance=post.importance,
        sentiment=post.sentiment,
        tickers=tuple(
            TickerMention.model_construct(symbol=t, relevance=V1_RELEVANCE) for t in dict.fromkeys(post.tickers)
        ),
        hashtags=post.hashtags,
        categories=post.categories,
        cover_image_url=post.cover_image_url,
        og_image_url=post.og_image_url,
        gallery_urls=post.gallery_urls,
        source=Source.model_construct(url=post.source_url, byline=post.byline),
        translations=tuple(PostTranslationV2.model_construct(**dict(tr)) for tr in post.translations),
    )


def upcast(event: AnyEvent) -> ProjectedEvent:
    """``event`` in the current version of its type."""
    if isinstance(event, PostEvent):
        return PostEventV2.model_construct(
            schema_version=2, version=event.version, emitted_at=event.emitted_at, type="post", data=post_v2(event.data)
        )
    return event


def stored_post(snapshot: str | bytes) -> PostV2:
    """A post snapshot stored by the projector (``posts.snapshot``), in the current version: rows
    written before version 2 hold a version 1 snapshot (with ``source_url``)."""
    doc = orjson.loads(snapshot)
    if "source_url" in doc:
        return post_v2(Post.model_validate(doc))
    return PostV2.model_validate(doc)
