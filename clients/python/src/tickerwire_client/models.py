"""Typed models of the OpenAPI document (schemas/openapi.json), forward compatible.

Every model is a frozen dataclass built by ``from_dict``. Fields the client does not know
yet land in ``extra`` (never an error), and a value outside a known enum is kept as the
plain string (``Sentiment | str``), so a new sentiment, exchange or ecosystem never breaks
a partner's code. Top-level responses carry ``meta``: status, limit headers, the
consistency mark (``X-Log-Position``) and the raw headers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Mapping, Self

from .meta import ResponseMeta


class OpenEnum(StrEnum):
    """A string enum that tolerates values it does not know."""

    @classmethod
    def parse(cls, value: str) -> Self | str:
        try:
            return cls(value)
        except ValueError:
            return value


class Sentiment(OpenEnum):
    BULLISH = "BULLISH"
    NEUTRAL = "NEUTRAL"
    BEARISH = "BEARISH"


class Direction(OpenEnum):
    LTR = "ltr"
    RTL = "rtl"


class Exchange(OpenEnum):
    BINANCE = "binance"
    COINBASE = "coinbase"
    KRAKEN = "kraken"
    OKX = "okx"
    BYBIT = "bybit"
    KUCOIN = "kucoin"
    BITSTAMP = "bitstamp"
    GATEIO = "gateio"
    BITFINEX = "bitfinex"


class Ecosystem(OpenEnum):
    BITCOIN = "ecosystems-bitcoin"
    ETHEREUM = "ecosystems-ethereum"
    SOLANA = "ecosystems-solana"
    BNB = "ecosystems-bnb"
    OTHER = "ecosystems-other"


def _extra(data: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in known}


def parse_timestamp(value: str) -> datetime:
    """ISO 8601 with ``Z`` or an offset, as the API writes it."""
    return datetime.fromisoformat(value)


def _extra_field() -> Any:
    """Fields the client does not know yet, kept as they came."""
    return field(default_factory=dict, compare=False, repr=False)


def _meta_field() -> Any:
    return field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class NamedRef:
    slug: str
    name: str
    extra: dict[str, Any] = _extra_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NamedRef:
        return cls(slug=d["slug"], name=d["name"], extra=_extra(d, _NAMED))


_NAMED = frozenset({"slug", "name"})


_LEAN = frozenset(
    {
        "id",
        "slug",
        "published_at",
        "lang",
        "canonical_url",
        "title",
        "lede",
        "cover_image_url",
        "categories",
        "importance",
        "sentiment",
    }
)


@dataclass(frozen=True, slots=True)
class PostLean:
    """The lean shape (schemas/openapi.json#/components/schemas/PostLean): lists, search and the stream."""

    id: int
    slug: str
    published_at: datetime
    lang: str
    canonical_url: str
    title: str
    lede: str
    cover_image_url: str
    categories: list[NamedRef]
    importance: int
    sentiment: Sentiment | str
    extra: dict[str, Any] = _extra_field()

    @classmethod
    def _lean_kwargs(cls, d: Mapping[str, Any]) -> dict[str, Any]:
        return dict(
            id=int(d["id"]),
            slug=d["slug"],
            published_at=parse_timestamp(d["published_at"]),
            lang=d["lang"],
            canonical_url=d["canonical_url"],
            title=d["title"],
            lede=d["lede"],
            cover_image_url=d["cover_image_url"],
            categories=[NamedRef.from_dict(c) for c in d.get("categories") or ()],
            importance=int(d["importance"]),
            sentiment=Sentiment.parse(d["sentiment"]),
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PostLean:
        return cls(**cls._lean_kwargs(d), extra=_extra(d, _LEAN))

    @property
    def order_key(self) -> tuple[datetime, int]:
        """The API's sort key (published_at, then id); lists are newest first."""
        return (self.published_at, self.id)


_DETAIL = _LEAN | {"body", "og_image_url", "gallery_urls", "tags", "hashtags", "byline", "source_url"}


@dataclass(frozen=True, slots=True)
class PostDetail(PostLean):
    """The detail shape (schemas/openapi.json#/components/schemas/PostDetail): every lean field plus the body and media."""

    body: str = ""
    og_image_url: str = ""
    gallery_urls: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    hashtags: list[str] = field(default_factory=list)
    byline: str = ""
    source_url: str = ""
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> PostDetail:
        return cls(
            **cls._lean_kwargs(d),
            body=d["body"],
            og_image_url=d["og_image_url"],
            gallery_urls=list(d.get("gallery_urls") or ()),
            tags=list(d.get("tags") or ()),
            hashtags=list(d.get("hashtags") or ()),
            byline=d["byline"],
            source_url=d["source_url"],
            extra=_extra(d, _DETAIL),
            meta=meta,
        )


@dataclass(frozen=True, slots=True)
class Page:
    """A page (schemas/openapi.json#/components/schemas/PostPage): lean posts newest first (search: best first), with both cursors."""

    posts: list[PostLean]
    next_cursor: str | None
    prev_cursor: str | None
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> Page:
        return cls(
            posts=[PostLean.from_dict(p) for p in d.get("posts") or ()],
            next_cursor=d.get("next_cursor"),
            prev_cursor=d.get("prev_cursor"),
            extra=_extra(d, frozenset({"posts", "next_cursor", "prev_cursor"})),
            meta=meta,
        )


_CATEGORY = frozenset({"slug", "name", "is_group", "group", "leaves"})


@dataclass(frozen=True, slots=True)
class Category:
    """A category (schemas/openapi.json#/components/schemas/Category): a group (``group`` None, ``leaves`` a list) or a leaf (``group`` set, ``leaves`` None)."""

    slug: str
    name: str
    is_group: bool
    group: NamedRef | None
    leaves: list[NamedRef] | None
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> Category:
        group, leaves = d.get("group"), d.get("leaves")
        return cls(
            slug=d["slug"],
            name=d["name"],
            is_group=bool(d["is_group"]),
            group=NamedRef.from_dict(group) if group is not None else None,
            leaves=[NamedRef.from_dict(x) for x in leaves] if leaves is not None else None,
            extra=_extra(d, _CATEGORY),
            meta=meta,
        )


@dataclass(frozen=True, slots=True)
class CategoryGroup:
    slug: str
    name: str
    leaves: list[NamedRef]
    extra: dict[str, Any] = _extra_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CategoryGroup:
        return cls(
            slug=d["slug"],
            name=d["name"],
            leaves=[NamedRef.from_dict(x) for x in d.get("leaves") or ()],
            extra=_extra(d, frozenset({"slug", "name", "leaves"})),
        )


@dataclass(frozen=True, slots=True)
class CategoryTree:
    """The taxonomy (schemas/openapi.json#/components/schemas/CategoryTree): groups with their leaves, each in display order."""

    groups: list[CategoryGroup]
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> CategoryTree:
        return cls(
            groups=[CategoryGroup.from_dict(g) for g in d.get("groups") or ()],
            extra=_extra(d, frozenset({"groups"})),
            meta=meta,
        )

    def leaves_of(self, slug: str) -> set[str]:
        """The leaf slugs a category filter ``slug`` matches (a group matches all its leaves)."""
        for g in self.groups:
            if g.slug == slug:
                return {leaf.slug for leaf in g.leaves}
        return {slug}


@dataclass(frozen=True, slots=True)
class EcosystemRef:
    slug: Ecosystem | str
    name: str
    extra: dict[str, Any] = _extra_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EcosystemRef:
        return cls(slug=Ecosystem.parse(d["slug"]), name=d["name"], extra=_extra(d, _NAMED))


_TOKEN = frozenset(
    {
        "ticker",
        "name",
        "logo_url",
        "post_count",
        "market_cap_rank",
        "exchange_listings",
        "categories",
        "genesis_date",
        "primary_ecosystem",
    }
)


@dataclass(frozen=True, slots=True)
class Token:
    """A token, the list shape (schemas/openapi.json#/components/schemas/Token)."""

    ticker: str
    name: str
    logo_url: str
    post_count: int
    market_cap_rank: int | None
    exchange_listings: list[Exchange | str]
    categories: list[str]
    genesis_date: date | None
    primary_ecosystem: EcosystemRef | None
    extra: dict[str, Any] = _extra_field()

    @classmethod
    def _token_kwargs(cls, d: Mapping[str, Any]) -> dict[str, Any]:
        eco, genesis = d.get("primary_ecosystem"), d.get("genesis_date")
        rank = d.get("market_cap_rank")
        return dict(
            ticker=d["ticker"],
            name=d["name"],
            logo_url=d["logo_url"],
            post_count=int(d["post_count"]),
            market_cap_rank=int(rank) if rank is not None else None,
            exchange_listings=[Exchange.parse(x) for x in d.get("exchange_listings") or ()],
            categories=list(d.get("categories") or ()),
            genesis_date=date.fromisoformat(genesis) if genesis else None,
            primary_ecosystem=EcosystemRef.from_dict(eco) if eco is not None else None,
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Token:
        return cls(**cls._token_kwargs(d), extra=_extra(d, _TOKEN))


@dataclass(frozen=True, slots=True)
class TokenDetail(Token):
    """A token, the single shape (schemas/openapi.json#/components/schemas/TokenDetail): the list fields plus homepage and description."""

    homepage_url: str = ""
    description: str | None = None
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> TokenDetail:
        return cls(
            **cls._token_kwargs(d),
            homepage_url=d["homepage_url"],
            description=d.get("description"),
            extra=_extra(d, _TOKEN | {"homepage_url", "description"}),
            meta=meta,
        )


@dataclass(frozen=True, slots=True)
class TokenList:
    tokens: list[Token]
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> TokenList:
        return cls(
            tokens=[Token.from_dict(t) for t in d.get("tokens") or ()],
            extra=_extra(d, frozenset({"tokens"})),
            meta=meta,
        )


_LANGUAGE = frozenset({"code", "name", "native_name", "country_code", "direction", "is_default"})


@dataclass(frozen=True, slots=True)
class Language:
    """A language (schemas/openapi.json#/components/schemas/Language)."""

    code: str
    name: str
    native_name: str
    country_code: str
    direction: Direction | str
    is_default: bool
    extra: dict[str, Any] = _extra_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Language:
        return cls(
            code=d["code"],
            name=d["name"],
            native_name=d["native_name"],
            country_code=d["country_code"],
            direction=Direction.parse(d["direction"]),
            is_default=bool(d["is_default"]),
            extra=_extra(d, _LANGUAGE),
        )


@dataclass(frozen=True, slots=True)
class LanguageList:
    languages: list[Language]
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> LanguageList:
        return cls(
            languages=[Language.from_dict(x) for x in d.get("languages") or ()],
            extra=_extra(d, frozenset({"languages"})),
            meta=meta,
        )

    @property
    def default(self) -> Language | None:
        return next((x for x in self.languages if x.is_default), None)


@dataclass(frozen=True, slots=True)
class SentimentShare:
    count: int
    percent: float

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SentimentShare:
        return cls(count=int(d["count"]), percent=float(d["percent"]))


@dataclass(frozen=True, slots=True)
class SentimentPulse:
    """The pulse (schemas/openapi.json#/components/schemas/SentimentPulse). ``breakdown`` is keyed by sentiment (an unknown sentiment keeps its string key)."""

    window: str
    as_of: datetime
    total_posts: int
    breakdown: dict[Sentiment | str, SentimentShare]
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> SentimentPulse:
        return cls(
            window=d["window"],
            as_of=parse_timestamp(d["as_of"]),
            total_posts=int(d["total_posts"]),
            breakdown={Sentiment.parse(k): SentimentShare.from_dict(v) for k, v in (d.get("breakdown") or {}).items()},
            extra=_extra(d, frozenset({"window", "as_of", "total_posts", "breakdown"})),
            meta=meta,
        )


@dataclass(frozen=True, slots=True)
class ChangesPage:
    """A page of ``GET /changes`` (schemas/openapi.json#/components/schemas/ChangesPage): lean posts
    in announcement order after the request's cursor, the ``cursor`` after them, and ``has_more``
    (false: everything committed so far was returned; poll again later from ``cursor``)."""

    posts: list[PostLean]
    cursor: str
    has_more: bool
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> ChangesPage:
        return cls(
            posts=[PostLean.from_dict(p) for p in d.get("posts") or ()],
            cursor=d["cursor"],
            has_more=bool(d["has_more"]),
            extra=_extra(d, frozenset({"posts", "cursor", "has_more"})),
            meta=meta,
        )
