"""The row each event of the log is stored as: pure functions, no I/O.

One builder per written table, from the event to its row dataclass (:mod:`.rows`): the post
itself, the catalog's locales and tokens, and the access entities. The per-locale rows of a
post (its translations and their partner JSON) come from :mod:`..readmodel.mapping`; categories are
written by the projector column by column. The projector applies these rows (live and in a
rebuild's bulk load); the statements that write them stay with it.
"""

from __future__ import annotations

import orjson

from tickerwire.schemas.models import (
    ApiKeyEvent,
    EmbedEvent,
    HeartbeatEvent,
    LocaleEvent,
    PostEventV2,
    TokenEvent,
    WebhookEndpointEvent,
    WorkspaceEvent,
)

from .rows import ApiKeyRow, EmbedRow, HeartbeatRow, LocaleRow, PostRow, TokenRow, WebhookEndpointRow, WorkspaceRow


def post_row(e: PostEventV2) -> PostRow:
    post = e.data
    return PostRow(
        id=post.id,
        version=e.version,
        status=post.status.value,
        published_at=post.published_at,
        sentiment=post.sentiment.value,
        importance=post.importance,
        tickers=list(post.symbols),
        snapshot=post.model_dump_json(),
    )


def locale_row(e: LocaleEvent) -> LocaleRow:
    l = e.data
    return LocaleRow(
        code=l.code,
        version=e.version,
        name=l.name,
        native_name=l.native_name,
        country_code=l.country_code,
        direction=l.direction,
        active=l.active,
        web_channel=l.web_channel,
        is_default=l.is_default,
        position=l.position,
    )


def token_row(e: TokenEvent) -> TokenRow:
    t = e.data
    return TokenRow(
        ticker=t.ticker,
        version=e.version,
        name=t.name,
        logo_url=t.logo_url,
        market_cap_rank=t.market_cap_rank,
        exchange_listings=orjson.dumps(t.exchange_listings).decode(),
        categories=orjson.dumps(t.categories).decode(),
        genesis_date=t.genesis_date,
        primary_ecosystem=t.primary_ecosystem.model_dump_json() if t.primary_ecosystem else None,
        homepage_url=t.homepage_url,
        description=t.description,
    )


def workspace_row(e: WorkspaceEvent) -> WorkspaceRow:
    w = e.data
    return WorkspaceRow(
        id=w.id,
        version=e.version,
        name=w.name,
        status=w.status,
        rate_limit_per_minute=w.rate_limit_per_minute,
        daily_quota=w.daily_quota,
        stream_connection_limit=w.stream_connection_limit,
    )


def api_key_row(e: ApiKeyEvent) -> ApiKeyRow:
    k = e.data
    return ApiKeyRow(
        id=k.id,
        version=e.version,
        workspace_id=k.workspace_id,
        key_hash=k.key_hash,
        display_prefix=k.display_prefix,
        issued_at=k.issued_at,
        revoked_at=k.revoked_at,
    )


def embed_row(e: EmbedEvent) -> EmbedRow:
    return EmbedRow(
        id=e.data.id,
        version=e.version,
        workspace_id=e.data.workspace_id,
        kind=e.data.kind,
        created_at=e.data.created_at,
    )


def heartbeat_row(e: HeartbeatEvent) -> HeartbeatRow:
    return HeartbeatRow(embed_id=e.data.embed_id, workspace_id=e.data.workspace_id, landed_at=e.data.landed_at)


def _json_list(values: list[str] | None) -> str | None:
    return None if values is None else orjson.dumps(values).decode()


def webhook_endpoint_row(e: WebhookEndpointEvent) -> WebhookEndpointRow:
    w = e.data
    return WebhookEndpointRow(
        id=w.id,
        version=e.version,
        workspace_id=w.workspace_id,
        url=w.url,
        locales=_json_list(w.locales),
        tickers=_json_list(w.tickers),
        categories=_json_list(w.categories),
        status=w.status,
        secret_generation=w.secret_generation,
        rotated_at=w.rotated_at,
        start_cursor=w.start_cursor,
        replay_from=w.replay_from,
        replay_seq=w.replay_seq,
        created_at=w.created_at,
        description=w.description,
    )
