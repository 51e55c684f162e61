"""The event contract: what platform teams publish to the log.

Every event is a full state snapshot of one entity, keyed by that entity's id, carrying a
monotonic per-entity ``version``. Replaying the latest snapshot of every key (a compacted
topic) rebuilds the whole read model. The JSON Schema files in ``schemas/events`` are
generated from these models (``tickerwire schemas export``) and a test keeps them equal.

Decoding happens once, at the edge, with :func:`decode_event`; everything downstream works
with these immutable, typed objects.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone
from enum import Enum
from typing import Annotated, ClassVar, Final, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .topics import ACCESS, CATALOG, POSTS, TopicSpec, topic_name

#: The first version of every event type's contract (the ``schema_version`` an event without one has).
SCHEMA_VERSION: Final = 1

#: The nine tracked centralized exchanges (``exchange_listings`` of
#: schemas/openapi.json#/components/schemas/Token). The set is fixed.
EXCHANGE_KEYS: tuple[str, ...] = (
    "binance",
    "coinbase",
    "kraken",
    "okx",
    "bybit",
    "kucoin",
    "bitstamp",
    "gateio",
    "bitfinex",
)

ECOSYSTEM_SLUGS: tuple[str, ...] = (
    "ecosystems-bitcoin",
    "ecosystems-ethereum",
    "ecosystems-solana",
    "ecosystems-bnb",
    "ecosystems-other",
)


Direction = Literal["ltr", "rtl"]
WorkspaceStatus = Literal["active", "suspended"]
EmbedKind = Literal["badge", "widget"]
WebhookEndpointStatus = Literal["active", "paused", "removed"]


class Sentiment(str, Enum):
    BULLISH = "BULLISH"
    NEUTRAL = "NEUTRAL"
    BEARISH = "BEARISH"


class PostStatus(str, Enum):
    draft = "draft"
    queued = "queued"
    publishing = "publishing"
    published = "published"
    partial = "partial"
    failed = "failed"
    retracted = "retracted"


#: Statuses that count toward a token's post_count (docs/api.md#post-count).
LIVE_STATUSES = frozenset({PostStatus.queued, PostStatus.publishing, PostStatus.published, PostStatus.partial})
#: Statuses whose translations partners can read (published everywhere, or in some locales).
VISIBLE_STATUSES = frozenset({PostStatus.published, PostStatus.partial})


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamp must carry a UTC offset")
    return value.astimezone(timezone.utc)


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


def _utc_ms(value: datetime) -> datetime:
    value = _utc(value)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


#: A post's publication time, to the millisecond: partners see milliseconds (the partner JSON's timestamps),
#: and posts are ordered and paged by (published_at, id), so the order must be the one they
#: can see. Two posts published within one millisecond are tied, and ties go by id.
PublishedAt = Annotated[datetime, AfterValidator(_utc_ms)]

_LOCALE_RE = r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$"
_SLUG_RE = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
_TICKER_RE = r"^[A-Z0-9][A-Z0-9.\-]{0,19}$"
_URL_RE = r"^https?://\S+$"
_HASH_RE = r"^[0-9a-f]{64}$"

LocaleCode = Annotated[str, Field(pattern=_LOCALE_RE, max_length=35)]
Slug = Annotated[str, Field(pattern=_SLUG_RE, min_length=1, max_length=200)]
Ticker = Annotated[str, Field(pattern=_TICKER_RE)]
Url = Annotated[str, Field(pattern=_URL_RE, max_length=2048)]
ShortText = Annotated[str, Field(min_length=1, max_length=500)]
Id = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_\-]+$")]


class Contract(BaseModel):
    """Base of every closed payload: immutable, an unknown field is an error (a typo never
    silently drops data). Every version 1 model is closed (schemas/README.md#versions)."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)


class OpenContract(BaseModel):
    """Base of every open payload: immutable, unknown fields are ignored, so a platform team may
    add an optional field without a new version (schemas/README.md#versions)."""

    model_config = ConfigDict(frozen=True, extra="ignore", str_strip_whitespace=False)


# --------------------------------------------------------------------------- payloads


class PostTranslation(Contract):
    lang: LocaleCode
    slug: Slug
    canonical_url: Url
    title: ShortText
    lede: Annotated[str, Field(min_length=1, max_length=2000)]
    body: Annotated[
        str, Field(min_length=1, max_length=200_000, json_schema_extra={"not": {"pattern": "<[a-zA-Z/][^>]*>"}})
    ]
    tags: tuple[Annotated[str, Field(min_length=1, max_length=100)], ...] = ()

    @field_validator("body")
    @classmethod
    def _plain_text(cls, body: str) -> str:
        if re.search(r"<[a-zA-Z/][^>]*>", body):
            raise ValueError("body must be plain text without HTML")
        return body


class Post(Contract):
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"status": {"enum": ["published", "partial"]}}},
            "then": {"required": ["published_at"], "properties": {"published_at": {"type": "string"}}},
        }
    )

    id: Annotated[int, Field(ge=1, le=2**53)]
    status: PostStatus
    published_at: PublishedAt | None = None
    importance: Annotated[int, Field(ge=0, le=100)]
    sentiment: Sentiment
    tickers: tuple[Ticker, ...] = ()
    hashtags: tuple[Annotated[str, Field(min_length=1, max_length=100)], ...] = ()
    categories: tuple[Slug, ...] = Field(default=(), description="Leaf category slugs")
    cover_image_url: Url
    og_image_url: Url
    gallery_urls: tuple[Url, ...] = ()
    source_url: Url
    byline: Annotated[str, Field(max_length=300)]
    translations: tuple[PostTranslation, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> "Post":
        _check_post(self.status, self.published_at, [t.lang for t in self.translations])
        return self


def _check_post(status: PostStatus, published_at: datetime | None, langs: list[str]) -> None:
    """The rules of a post snapshot in every version: distinct locales, a visible post has a time."""
    if len(langs) != len(set(langs)):
        raise ValueError("translations must have distinct lang values")
    if status in VISIBLE_STATUSES and published_at is None:
        raise ValueError(f"a {status.value} post needs published_at")


class PostTranslationV2(PostTranslation):
    """A translation in version 2 of the post event: the same fields, open."""

    model_config = ConfigDict(extra="ignore")


class TickerMention(OpenContract):
    """A ticker a post is about, with how much it is about it (1 = the post's subject)."""

    symbol: Ticker
    relevance: Annotated[float, Field(ge=0, le=1)]


class Source(OpenContract):
    """Where a post's story comes from: the original article and its byline."""

    url: Url
    byline: Annotated[str, Field(max_length=300)]


class PostV2(OpenContract):
    """Version 2 of a post's snapshot: tickers carry a relevance weight, the source is one
    object, and ``updated_at`` says when the story last changed. Open: unknown fields are ignored."""

    model_config = ConfigDict(json_schema_extra=Post.model_config["json_schema_extra"])

    id: Annotated[int, Field(ge=1, le=2**53)]
    status: PostStatus
    published_at: PublishedAt | None = None
    updated_at: UtcDatetime | None = None
    importance: Annotated[int, Field(ge=0, le=100)]
    sentiment: Sentiment
    tickers: tuple[TickerMention, ...] = ()
    hashtags: tuple[Annotated[str, Field(min_length=1, max_length=100)], ...] = ()
    categories: tuple[Slug, ...] = Field(default=(), description="Leaf category slugs")
    cover_image_url: Url
    og_image_url: Url
    gallery_urls: tuple[Url, ...] = ()
    source: Source
    translations: tuple[PostTranslationV2, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> "PostV2":
        _check_post(self.status, self.published_at, [t.lang for t in self.translations])
        if len(self.symbols) != len(set(self.symbols)):
            raise ValueError("tickers must have distinct symbol values")
        return self

    @property
    def symbols(self) -> tuple[str, ...]:
        """The tickers' symbols, in order."""
        return tuple(t.symbol for t in self.tickers)


class Ecosystem(Contract):
    slug: Literal[ECOSYSTEM_SLUGS]  # type: ignore[valid-type]
    name: ShortText


class Token(Contract):
    ticker: Ticker
    name: ShortText
    logo_url: Url
    market_cap_rank: Annotated[int, Field(ge=1)] | None
    exchange_listings: tuple[Literal[EXCHANGE_KEYS], ...] = ()  # type: ignore[valid-type]
    categories: tuple[Annotated[str, Field(min_length=1, max_length=100)], ...] = ()
    genesis_date: date | None
    primary_ecosystem: Ecosystem | None
    homepage_url: Url
    description: Annotated[str, Field(max_length=20_000)] | None


class Category(Contract):
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"is_group": {"const": True}}},
            "then": {"properties": {"group_slug": {"type": "null"}}},
            "else": {"properties": {"group_slug": {"type": "string"}}},
        }
    )

    slug: Slug
    is_group: bool
    group_slug: Slug | None
    position: Annotated[int, Field(ge=0)]
    names: dict[LocaleCode, ShortText] = Field(min_length=1, description="Localized names by locale code")

    @model_validator(mode="after")
    def _shape(self) -> "Category":
        if self.is_group and self.group_slug is not None:
            raise ValueError("a group has no group_slug")
        if not self.is_group and self.group_slug is None:
            raise ValueError("a leaf needs group_slug")
        return self


class Locale(Contract):
    code: LocaleCode
    name: ShortText
    native_name: ShortText
    country_code: Annotated[str, Field(pattern=r"^[A-Z]{2}$")]
    direction: Direction
    active: bool
    web_channel: bool
    is_default: bool
    position: Annotated[int, Field(ge=0)] = 0


class Workspace(Contract):
    id: Id
    name: ShortText
    status: WorkspaceStatus
    rate_limit_per_minute: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    daily_quota: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    stream_connection_limit: Annotated[int, Field(ge=1, le=10_000)] | None = None


class ApiKey(Contract):
    """An API key as the log knows it: only a SHA-256 hash and a display prefix, never the key."""

    id: Id
    workspace_id: Id
    key_hash: Annotated[str, Field(pattern=_HASH_RE)]
    display_prefix: Annotated[str, Field(min_length=4, max_length=24)]
    issued_at: UtcDatetime
    revoked_at: UtcDatetime | None = None


class Embed(Contract):
    id: Annotated[str, Field(pattern=r"^bdg_[A-Za-z0-9]{4,64}$")]
    workspace_id: Id
    kind: EmbedKind
    created_at: UtcDatetime


class Heartbeat(Contract):
    """The embed pinged from a partner page; ``landed_at`` is when the ping reached us."""

    embed_id: Annotated[str, Field(pattern=r"^bdg_[A-Za-z0-9]{4,64}$")]
    workspace_id: Id
    landed_at: UtcDatetime


class WebhookEndpoint(Contract):
    """A workspace's webhook endpoint (docs/webhooks.md): where the dispatcher POSTs the
    workspace's ``post.created`` messages, through the stream's filters.

    The signing secret is never in the log: it is derived from the operator's signing key, the
    endpoint id and ``secret_generation`` (``services/common/http/signing.py``). A rotation
    raises the generation and sets ``rotated_at``; the previous generation still signs until
    the rotation window after it has passed. ``start_cursor`` is where delivery begins (the
    read model's frontier when it was registered). A replay asks the dispatcher to deliver
    again from ``replay_from`` (a resume cursor): each request raises ``replay_seq``. An
    operator's ``resume`` of a disabled endpoint is any later version with status ``active``.
    ``description`` is the partner's note on the endpoint (optional, added after version 1 was
    published: backward compatible, docs/webhooks.md#schema-of-the-endpoint-event)."""

    id: Annotated[str, Field(pattern=r"^whe_[A-Za-z0-9]{4,64}$")]
    workspace_id: Id
    url: Url
    locales: Annotated[list[LocaleCode], Field(max_length=50)] | None = None
    tickers: Annotated[list[Ticker], Field(max_length=100)] | None = None
    categories: Annotated[list[Slug], Field(max_length=50)] | None = None
    status: WebhookEndpointStatus
    secret_generation: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    rotated_at: UtcDatetime | None = None
    start_cursor: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    replay_from: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    replay_seq: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    created_at: UtcDatetime
    #: Added in this release, optional: an event written before it (none) decodes as "".
    description: Annotated[str, Field(max_length=200)] = ""


# --------------------------------------------------------------------------- envelopes


class _Envelope(Contract):
    #: The registry, one line per event type (below): the topic it travels on, and the field of
    #: ``data`` holding the entity id, whose log key is ``<type>:<id>`` (see :func:`entity_key`).
    topic: ClassVar[TopicSpec]
    key_field: ClassVar[str]

    schema_version: Literal[1] = SCHEMA_VERSION
    version: Annotated[int, Field(ge=1, le=2**62)] = Field(
        description="Monotonic per entity; a lower or equal version never replaces a higher one"
    )
    emitted_at: UtcDatetime


# --------------------------------------------------------------------------- the event registry
# Each event type is declared here once: its type name, data model, topic and entity key field.
# The union, EVENT_MODELS, entity_key and the topics' event types are derived from these.


class PostEvent(_Envelope):
    topic, key_field = POSTS, "id"
    type: Literal["post"] = "post"
    data: Post


class PostEventV2(_Envelope):
    """Version 2 of the post event (:class:`PostV2`); the envelope stays closed."""

    topic, key_field = POSTS, "id"
    schema_version: Literal[2] = 2  # type: ignore[assignment]
    type: Literal["post"] = "post"
    data: PostV2


class TokenEvent(_Envelope):
    topic, key_field = CATALOG, "ticker"
    type: Literal["token"] = "token"
    data: Token


class CategoryEvent(_Envelope):
    topic, key_field = CATALOG, "slug"
    type: Literal["category"] = "category"
    data: Category


class LocaleEvent(_Envelope):
    topic, key_field = CATALOG, "code"
    type: Literal["locale"] = "locale"
    data: Locale


class WorkspaceEvent(_Envelope):
    topic, key_field = ACCESS, "id"
    type: Literal["workspace"] = "workspace"
    data: Workspace


class ApiKeyEvent(_Envelope):
    topic, key_field = ACCESS, "id"
    type: Literal["api_key"] = "api_key"
    data: ApiKey


class EmbedEvent(_Envelope):
    topic, key_field = ACCESS, "id"
    type: Literal["embed"] = "embed"
    data: Embed


class HeartbeatEvent(_Envelope):
    topic, key_field = ACCESS, "embed_id"
    type: Literal["heartbeat"] = "heartbeat"
    data: Heartbeat


class WebhookEndpointEvent(_Envelope):
    topic, key_field = ACCESS, "id"
    type: Literal["webhook_endpoint"] = "webhook_endpoint"
    data: WebhookEndpoint


#: Any event: the list of the declared event types, every version of each.
AnyEvent = (
    PostEvent
    | PostEventV2
    | TokenEvent
    | CategoryEvent
    | LocaleEvent
    | WorkspaceEvent
    | ApiKeyEvent
    | EmbedEvent
    | HeartbeatEvent
    | WebhookEndpointEvent
)

#: Every event model by type name and ``schema_version``, in declaration order.
EVENT_VERSIONS: dict[str, dict[int, type[_Envelope]]] = {}
for _model in get_args(AnyEvent):
    EVENT_VERSIONS.setdefault(_model.model_fields["type"].default, {})[
        _model.model_fields["schema_version"].default
    ] = _model

#: The first version of each event type by type name: its topic and entity key hold in every version.
EVENT_MODELS: dict[str, type[_Envelope]] = {name: versions[SCHEMA_VERSION] for name, versions in EVENT_VERSIONS.items()}


def event_types(topic: TopicSpec) -> tuple[str, ...]:
    """The event types that travel on ``topic``."""
    return tuple(name for name, model in EVENT_MODELS.items() if model.topic == topic)


def topic_for_event_type(prefix: str, event_type: str) -> str:
    return topic_name(prefix, EVENT_MODELS[event_type].topic)


class InvalidEvent(ValueError):
    """Raised by :func:`decode_event` with a short, human-readable reason."""

    def __init__(self, reason: str, kind: str = "schema") -> None:
        super().__init__(reason)
        self.reason = reason
        #: ``undecodable`` (not UTF-8 JSON), ``unknown_type``, ``unknown_schema_version`` or ``schema``.
        self.kind = kind


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(str(p) for p in e["loc"])
        parts.append(f"{loc}: {e['msg']}" if loc else e["msg"])
    return "; ".join(parts)


#: The magic byte of a schema-registry serializer's frame (Confluent's wire format).
REGISTRY_MAGIC: Final = 0
#: The frame's length: the magic byte and a 4-byte big-endian schema id.
REGISTRY_HEADER: Final = 5


def registry_schema_id(raw: bytes | str | None) -> int | None:
    """The schema id of a value framed by a schema-registry serializer (Confluent's wire format:
    the magic byte 0, a 4-byte big-endian schema id, then the JSON payload), else None. A JSON
    text never starts with the byte 0, so the two never mix."""
    if not isinstance(raw, bytes) or len(raw) < REGISTRY_HEADER or raw[0] != REGISTRY_MAGIC:
        return None
    return int.from_bytes(raw[1:REGISTRY_HEADER], "big")


def unframe(raw: bytes | str) -> tuple[int | None, bytes | str]:
    """``(schema id, JSON payload)`` of a record value: a framed value loses its frame, a plain
    one is its own payload (schema id None)."""
    schema_id = registry_schema_id(raw)
    return (schema_id, raw[REGISTRY_HEADER:]) if schema_id is not None else (None, raw)


def event_model(doc: dict) -> type[_Envelope]:
    """The model of a decoded JSON object by its ``type`` and ``schema_version`` (1 when absent),
    or :class:`InvalidEvent`."""
    kind = doc.get("type")
    if kind not in EVENT_VERSIONS:
        raise InvalidEvent(f"unknown event type {kind!r}; known: {', '.join(EVENT_VERSIONS)}", "unknown_type")
    version = doc.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int:
        raise InvalidEvent(f"{kind}: schema_version: must be an integer, not {version!r}", "schema")
    versions = EVENT_VERSIONS[kind]
    if version not in versions:
        known = ", ".join(str(v) for v in versions)
        raise InvalidEvent(
            f"{kind}: schema_version {version} is not known to this release (known: {known}); "
            "`tickerwire dead-letters retry` applies it after an upgrade that knows it",
            "unknown_schema_version",
        )
    return versions[version]


def decode_event(raw: bytes | str) -> AnyEvent:
    """Decode one log record value (plain JSON, or JSON framed by a schema-registry serializer)
    into a typed event of its own version, or raise :class:`InvalidEvent` (its reason names the
    schema id of a framed value)."""
    schema_id, payload = unframe(raw)
    try:
        return _decode_json(payload)
    except InvalidEvent as exc:
        if schema_id is None:
            raise
        raise InvalidEvent(
            f"{exc.reason} (framed by a schema-registry serializer, schema id {schema_id})", exc.kind
        ) from None


def _decode_json(payload: bytes | str) -> AnyEvent:
    import orjson

    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(f"not valid UTF-8 JSON: {exc}", "undecodable") from None
    if not isinstance(doc, dict):
        raise InvalidEvent("event must be a JSON object", "schema")
    model = event_model(doc)
    try:
        return model.model_validate(doc)  # type: ignore[return-value]
    except ValidationError as exc:
        raise InvalidEvent(f"{doc['type']}: {_describe(exc)}", "schema") from None


def encode_event(event: _Envelope) -> bytes:
    """Serialize an event the way publishers put it on the log."""
    return event.model_dump_json(exclude_none=False).encode()


def entity_key(event: AnyEvent) -> str:
    """The log key of an event: its entity id. Compaction keeps the latest snapshot per key."""
    return f"{event.type}:{getattr(event.data, event.key_field)}"
