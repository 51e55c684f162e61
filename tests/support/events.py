"""Event factories for tests: one snapshot of each entity type with the fields a test varies,
and :func:`records`, events as consecutive log records of one partition."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

import asyncpg
import orjson

from tickerwire.schemas.models import (
    VISIBLE_STATUSES,
    ApiKey,
    ApiKeyEvent,
    Category,
    CategoryEvent,
    Embed,
    EmbedEvent,
    Heartbeat,
    HeartbeatEvent,
    Locale,
    LocaleEvent,
    Post,
    PostEvent,
    Token,
    TokenEvent,
    WebhookEndpoint,
    WebhookEndpointEvent,
    Workspace,
    WorkspaceEvent,
    encode_event,
    entity_key,
)
from tickerwire.services.cli import admin
from tickerwire.services.projector.apply import ConsumedRecord
from tickerwire.services.readmodel.upcast import upcast

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)


def locale_ev(
    code: str,
    version: int = 1,
    *,
    default: bool = False,
    active: bool = True,
    web: bool = True,
    position: int = 0,
    name: str | None = None,
    country: str = "US",
) -> LocaleEvent:
    return LocaleEvent(
        version=version,
        emitted_at=T0,
        data=Locale(
            code=code,
            name=name or f"Name {code} v{version}",
            native_name=name or f"Native {code}",
            country_code=country,
            direction="ltr",
            active=active,
            web_channel=web,
            is_default=default,
            position=position,
        ),
    )


def webhook_endpoint_ev(
    endpoint_id: str, workspace: str, version: int, status: str = "active", *, now: datetime = T0, **data: Any
) -> WebhookEndpointEvent:
    """A webhook endpoint's snapshot at ``version``, created ``version`` hours before ``now`` (so a
    higher version is an older endpoint); ``data``: its other fields (url, filters, generation...)."""
    return WebhookEndpointEvent(
        version=version,
        emitted_at=now,
        data=WebhookEndpoint(
            id=endpoint_id,
            workspace_id=workspace,
            status=status,
            created_at=now - timedelta(hours=version),
            **{"url": f"https://hooks.example/{endpoint_id}", **data},
        ),
    )


def category_ev(
    slug: str, version: int = 1, *, group: str | None = None, names: dict[str, str] | None = None, position: int = 0
) -> CategoryEvent:
    return CategoryEvent(
        version=version,
        emitted_at=T0,
        data=Category(
            slug=slug,
            is_group=group is None,
            group_slug=group,
            position=position,
            names=names or {"en-US": f"{slug} v{version}"},
        ),
    )


def token_ev(ticker: str, version: int = 1, *, rank: int | None = 1) -> TokenEvent:
    return TokenEvent(
        version=version,
        emitted_at=T0,
        data=Token(
            ticker=ticker,
            name=f"{ticker} v{version}",
            logo_url="https://img.example/t.png",
            market_cap_rank=rank,
            exchange_listings=("binance",),
            categories=("layer-1",),
            genesis_date=None,
            primary_ecosystem=None,
            homepage_url="https://t.example",
            description=None,
        ),
    )


def post_ev(
    post_id: int,
    version: int = 1,
    *,
    status: str = "published",
    at: datetime | None = T0,
    sentiment: str = "BULLISH",
    tickers: Sequence[str] = ("BTC",),
    categories: Sequence[str] = (),
    langs: Sequence[str] = ("en-US",),
    importance: int = 50,
    hashtags: Sequence[str] = ("Crypto",),
    title: str | None = None,
    lede: str = "Markets moved.",
    body: str = "Prices rose sharply.",
    emitted_at: datetime | None = None,
) -> PostEvent:
    """A post snapshot; every translation (one per ``langs``) has the same ``title`` (default:
    ``"Bitcoin rallies <id> v<version>"``), ``lede`` and ``body``."""
    if status in ("published", "partial") and at is None:
        at = T0
    return PostEvent(
        version=version,
        emitted_at=emitted_at or T0 + timedelta(seconds=version),
        data=Post.model_validate(
            dict(
                id=post_id,
                status=status,
                published_at=at,
                importance=importance,
                sentiment=sentiment,
                tickers=list(tickers),
                hashtags=list(hashtags),
                categories=list(categories),
                cover_image_url="https://img.example/c.jpg",
                og_image_url="https://img.example/o.jpg",
                source_url="https://src.example/a",
                byline="Desk",
                translations=[
                    dict(
                        lang=lang,
                        slug=f"p{post_id}-{lang.lower()}",
                        canonical_url=f"https://n.example/{post_id}/{lang}",
                        title=title or f"Bitcoin rallies {post_id} v{version}",
                        lede=lede,
                        body=body,
                    )
                    for lang in langs
                ],
            )
        ),
    )


def fresh_post_ev(post_id: int, **fields: Any) -> PostEvent:
    """:func:`post_ev` published a second ago and emitted now: a new post for running processes."""
    now = datetime.now(timezone.utc)
    return post_ev(post_id, at=now - timedelta(seconds=1), emitted_at=now, **fields)


def post_event(
    post_id: int,
    version: int,
    langs: Sequence[str],
    *,
    now: datetime,
    status: str = "published",
    age_s: float = 0.0,
    tickers: Sequence[str] = ("BTC",),
) -> PostEvent:
    """Version ``version`` of post ``post_id`` with translations in ``langs``, published ``age_s``
    before ``now`` and emitted now: the posts the end-to-end suites (and the TypeScript client's)
    publish to running processes."""
    return post_ev(
        post_id,
        version,
        status=status,
        at=now - timedelta(seconds=age_s),
        sentiment="NEUTRAL",
        tickers=tickers,
        langs=langs,
        hashtags=(),
        title=f"Post {post_id} v{version}",
        lede="A lede.",
        body="One.\n\nTwo.",
        emitted_at=datetime.now(timezone.utc),
    )


def workspace_ev(ws_id: str, version: int = 1, *, status: str = "active") -> WorkspaceEvent:
    return WorkspaceEvent(
        version=version, emitted_at=T0, data=Workspace(id=ws_id, name=f"{ws_id} v{version}", status=status)
    )


def api_key_ev(key_id: str, ws_id: str, version: int = 1, *, revoked: bool = False) -> ApiKeyEvent:
    return ApiKeyEvent(
        version=version,
        emitted_at=T0,
        data=ApiKey(
            id=key_id,
            workspace_id=ws_id,
            key_hash=f"{abs(hash(key_id)) % 10**20:064d}",
            display_prefix="tw_live_abcd",
            issued_at=T0,
            revoked_at=T0 if revoked else None,
        ),
    )


def embed_ev(embed_id: str, ws_id: str, version: int = 1, kind: str = "badge") -> EmbedEvent:
    return EmbedEvent(
        version=version, emitted_at=T0, data=Embed(id=embed_id, workspace_id=ws_id, kind=kind, created_at=T0)
    )


def heartbeat_ev(embed_id: str, ws_id: str, landed_at: datetime) -> HeartbeatEvent:
    return HeartbeatEvent(
        version=max(int(landed_at.timestamp() * 1000), 1),
        emitted_at=T0,
        data=Heartbeat(embed_id=embed_id, workspace_id=ws_id, landed_at=landed_at),
    )


def records(events: Iterable[Any], start: int = 0) -> list[ConsumedRecord]:
    """Events as consecutive log records; a ``bytes`` item is a raw (possibly poison) value."""
    out = []
    for offset, ev in enumerate(events, start):
        if ev is None or isinstance(ev, bytes):
            out.append(ConsumedRecord(offset, b"raw", ev))
        else:
            out.append(ConsumedRecord(offset, entity_key(ev).encode(), encode_event(ev)))
    return out


def visible_feed(posts: Sequence[PostEvent], lang: str = "en-US") -> list[Post]:
    """The posts a partner may list in ``lang``, newest first (the latest version of each post)."""
    latest: dict[int, PostEvent] = {}
    for e in posts:
        if e.data.id not in latest or latest[e.data.id].version < e.version:
            latest[e.data.id] = e
    shown = [
        e.data
        for e in latest.values()
        if e.data.status in VISIBLE_STATUSES
        and e.data.published_at
        and any(t.lang == lang for t in e.data.translations)
    ]
    return sorted(shown, key=lambda p: (p.published_at, p.id), reverse=True)


async def provisioning(conn: asyncpg.Connection, workspace_id: str, **limits: Any) -> tuple[str, list[Any]]:
    """A new key for ``workspace_id`` and the events that make it work, as the admin CLI builds
    them: the workspace snapshot (``limits``), the key's hash, an embed and a fresh heartbeat.
    (A badge sweep after projecting them grants the badge.) ``conn`` reads the read model."""
    ws = await admin.workspace_event(conn, workspace_id, create=True, **limits)
    key, key_event = admin.issue_key(workspace_id)
    embed_id = "bdg_" + "".join(ch for ch in workspace_id if ch.isalnum())[:40].ljust(4, "0")
    return key, [
        ws,
        key_event,
        admin.embed_event(embed_id, workspace_id),
        admin.heartbeat_event(embed_id, workspace_id),
    ]


def encode_v2(event: PostEvent, **unknown: Any) -> bytes:
    """``event`` as a publisher of version 2 of the post event sends the same post (each ticker
    with relevance 1, ``source`` from ``source_url`` and ``byline``); ``unknown``: fields added
    to ``data`` that this release does not know (version 2 ignores them)."""
    doc = orjson.loads(upcast(event).model_dump_json())
    doc["data"].update(unknown)
    return orjson.dumps(doc)
