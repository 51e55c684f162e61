"""The pure mapping from a post event to its per-locale read-model rows and partner-facing JSON.

No I/O here. The projector stores what these functions return, the API serves the stored
bytes, and the stream sends the same stored bytes, so a pushed post equals the listed one
by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import orjson

from tickerwire.schemas.models import VISIBLE_STATUSES, Category, PostStatus, PostTranslation, PostV2

from .searchtext import index_text

#: PostgreSQL text-search configurations by primary language subtag; `simple` elsewhere.
_TS_CONFIGS = {
    "ar": "arabic",
    "da": "danish",
    "de": "german",
    "el": "greek",
    "en": "english",
    "es": "spanish",
    "fi": "finnish",
    "fr": "french",
    "hu": "hungarian",
    "id": "indonesian",
    "it": "italian",
    "nl": "dutch",
    "no": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sv": "swedish",
    "tr": "turkish",
}


def text_search_config(lang: str) -> str:
    """The PostgreSQL text-search configuration for a locale (``simple`` when none stems it)."""
    return _TS_CONFIGS.get(lang.split("-", 1)[0].lower(), "simple")


def iso_utc(value: datetime) -> str:
    """Partner timestamps: ISO 8601 in UTC with a ``Z`` suffix and millisecond precision."""
    value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


#: The default locale when no listed locale is flagged default (docs/api.md#lang-fallback).
FALLBACK_LOCALE = "en-US"
#: The languages list has at most this many entries (docs/api.md#languages).
MAX_LISTED_LOCALES = 14


def default_locale(listed: Iterable[tuple[str, bool]]) -> str:
    """The one default-locale rule, for the names in stored posts and for every API answer.

    ``listed``: the supported locales (active, on the web channel) in listing order, as
    ``(code, is_default)``. The first one flagged default; else en-US when it is listed; else
    the first listed locale; en-US when none is listed."""
    codes = []
    for code, is_default in listed:
        if is_default:
            return code
        codes.append(code)
    if FALLBACK_LOCALE in codes or not codes:
        return FALLBACK_LOCALE
    return codes[0]


def category_name(names: Mapping[str, str], slug: str, lang: str, default_lang: str) -> str:
    """The one category-name fallback: the name in ``lang``, else in the default locale, else
    its first name, else the slug."""
    return names.get(lang) or names.get(default_lang) or next(iter(names.values()), slug)


@dataclass(frozen=True, slots=True)
class Taxonomy:
    """The category tree, enough to localize names and expand leaves to their groups."""

    categories: Mapping[str, Category]
    default_lang: str = FALLBACK_LOCALE

    def name(self, slug: str, lang: str) -> str:
        cat = self.categories.get(slug)
        return slug if cat is None else category_name(cat.names, slug, lang, self.default_lang)

    def filter_slugs(self, leaves: tuple[str, ...]) -> tuple[str, ...]:
        """Slugs a post matches in the ``category`` filter: its leaves and their groups."""
        out: list[str] = []
        for slug in leaves:
            if slug not in out:
                out.append(slug)
            cat = self.categories.get(slug)
            if cat is not None and cat.group_slug and cat.group_slug not in out:
                out.append(cat.group_slug)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class MappedTranslation:
    """One row of ``post_translations``: a post as partners read it in one locale."""

    post_id: int
    lang: str
    slug: str
    published_at: datetime | None
    importance: int
    sentiment: str
    visible: bool
    category_slugs: tuple[str, ...]
    tickers: tuple[str, ...]
    hashtags: tuple[str, ...]
    #: What the row's search vector is computed from: the locale's text-search configuration
    #: and the translation's title, lede and body as :func:`~.searchtext.index_text` gives them.
    ts_config: str
    title: str
    lede: str
    body: str
    #: The partner JSON of the post in this locale: the lean shape (lists, stream) and the detail shape.
    lean: str
    detail: str


def lean_post(post: PostV2, tr: PostTranslation, taxonomy: Taxonomy) -> dict[str, Any]:
    """The lean shape (schemas/openapi.json#/components/schemas/PostLean), fields in its order."""
    return {
        "id": post.id,
        "slug": tr.slug,
        "published_at": iso_utc(post.published_at) if post.published_at else None,
        "lang": tr.lang,
        "canonical_url": tr.canonical_url,
        "title": tr.title,
        "lede": tr.lede,
        "cover_image_url": post.cover_image_url,
        "categories": [{"slug": s, "name": taxonomy.name(s, tr.lang)} for s in post.categories],
        "importance": post.importance,
        "sentiment": post.sentiment.value,
    }


def detail_post(post: PostV2, tr: PostTranslation, taxonomy: Taxonomy) -> dict[str, Any]:
    """The detail shape (schemas/openapi.json#/components/schemas/PostDetail): the lean fields plus the detail fields."""
    doc = lean_post(post, tr, taxonomy)
    doc.update(
        body=tr.body,
        og_image_url=post.og_image_url,
        gallery_urls=list(post.gallery_urls),
        tags=list(tr.tags),
        hashtags=list(post.hashtags),
        byline=post.source.byline,
        source_url=post.source.url,
    )
    return doc


def visible_state(status: PostStatus, published_at: datetime | None) -> bool:
    """The visibility rule: partners see a post's translations while it is published (or
    partially published) and has a publication time."""
    return status in VISIBLE_STATUSES and published_at is not None


def is_visible(post: PostV2) -> bool:
    """Whether partners see ``post`` (:func:`visible_state`)."""
    return visible_state(post.status, post.published_at)


def hashtag_key(tag: str) -> str:
    """How a hashtag is indexed and matched: case-insensitively (the stored rows and the
    ``hashtag`` filter both use this)."""
    return tag.lower()


def translation_rows(post: PostV2, taxonomy: Taxonomy) -> list[MappedTranslation]:
    """Every per-locale row one post snapshot projects to."""
    visible = is_visible(post)
    filter_slugs = taxonomy.filter_slugs(post.categories)
    return [
        MappedTranslation(
            post_id=post.id,
            lang=tr.lang,
            slug=tr.slug,
            published_at=post.published_at,
            importance=post.importance,
            sentiment=post.sentiment.value,
            visible=visible,
            category_slugs=filter_slugs,
            tickers=post.symbols,
            hashtags=tuple(hashtag_key(h) for h in post.hashtags),
            ts_config=text_search_config(tr.lang),
            title=index_text(tr.title),
            lede=index_text(tr.lede),
            body=index_text(tr.body),
            lean=orjson.dumps(lean_post(post, tr, taxonomy)).decode(),
            detail=orjson.dumps(detail_post(post, tr, taxonomy)).decode(),
        )
        for tr in post.translations
    ]
