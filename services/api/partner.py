"""The partner JSON of every resource but posts: pure functions, no I/O.

Posts are shaped when they are projected (:func:`..readmodel.mapping.lean_post`,
:func:`..readmodel.mapping.detail_post`) and served as stored. Everything else partners read is shaped
here from read-model rows (mappings by column name, JSON columns already decoded): the API
caches or sends the result and only serializes it. Fields are in the order of the OpenAPI schemas.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any, Mapping, Sequence

from tickerwire.schemas.models import Sentiment

from ..readmodel.deliveries import webhook_disabled
from ..readmodel.mapping import category_name, iso_utc

#: A read-model row by column name (JSON columns decoded).
ReadRow = Mapping[str, Any]

#: schemas/openapi.json#/components/schemas/SentimentPulse: the pulse's sentiments, in the order of its breakdown.
SENTIMENTS = tuple(s.value for s in Sentiment)


# --------------------------------------------------------------------------- languages (LanguageList)


def language_list(listed: Sequence[ReadRow], default: str) -> dict[str, Any]:
    """The supported languages (the listed locales, in listing order); exactly the default one
    is flagged ``is_default`` (:func:`..readmodel.mapping.default_locale` chose it)."""
    return {
        "languages": [
            {
                "code": r["code"],
                "name": r["name"],
                "native_name": r["native_name"],
                "country_code": r["country_code"],
                "direction": r["direction"],
                "is_default": r["code"] == default,
            }
            for r in listed
        ]
    }


# --------------------------------------------------------------------------- categories (CategoryTree, Category)


class CategoryShapes:
    """The category rows (``slug``, ``is_group``, ``group_slug``, ``names`` decoded; in listing
    order) and the shapes of ``CategoryTree`` and ``Category`` (schemas/openapi.json) in any locale, names by :func:`..readmodel.mapping.category_name`."""

    def __init__(self, rows: Sequence[ReadRow], default: str) -> None:
        self.rows = list(rows)
        self.default = default
        self._by_slug = {r["slug"]: r for r in self.rows}
        self._names = {r["slug"]: r["names"] for r in self.rows}
        self._leaves: dict[str, list[ReadRow]] = defaultdict(list)
        for r in self.rows:
            if not r["is_group"]:
                self._leaves[r["group_slug"]].append(r)

    def name(self, slug: str, lang: str) -> str:
        return category_name(self._names[slug], slug, lang, self.default)

    def _leaf_list(self, group: str, lang: str) -> list[dict[str, Any]]:
        return [{"slug": l["slug"], "name": self.name(l["slug"], lang)} for l in self._leaves.get(group, [])]

    def tree(self, lang: str) -> dict[str, Any]:
        """schemas/openapi.json#/components/schemas/CategoryTree: every group with its leaves."""
        return {
            "groups": [
                {"slug": g["slug"], "name": self.name(g["slug"], lang), "leaves": self._leaf_list(g["slug"], lang)}
                for g in self.rows
                if g["is_group"]
            ]
        }

    def category(self, slug: str, lang: str) -> dict[str, Any]:
        """schemas/openapi.json#/components/schemas/Category: one category; a group with its leaves, a leaf with its group (None when the
        group is unknown)."""
        r = self._by_slug[slug]
        if r["is_group"]:
            return {
                "slug": slug,
                "name": self.name(slug, lang),
                "is_group": True,
                "group": None,
                "leaves": self._leaf_list(slug, lang),
            }
        parent = r["group_slug"]
        group = {"slug": parent, "name": self.name(parent, lang)} if parent in self._names else None
        return {"slug": slug, "name": self.name(slug, lang), "is_group": False, "group": group, "leaves": None}


# --------------------------------------------------------------------------- tokens (Token, TokenDetail, TokenList)


def token_item(r: ReadRow) -> dict[str, Any]:
    """A token in the listing (schemas/openapi.json#/components/schemas/Token); ``primary_ecosystem`` decoded, ``post_count`` counted."""
    return {
        "ticker": r["ticker"],
        "name": r["name"],
        "logo_url": r["logo_url"],
        "post_count": r["post_count"],
        "market_cap_rank": r["market_cap_rank"],
        "exchange_listings": list(r["exchange_listings"]),
        "categories": list(r["categories"]),
        "genesis_date": r["genesis_date"],
        "primary_ecosystem": r["primary_ecosystem"],
    }


def token_detail(r: ReadRow) -> dict[str, Any]:
    """One token (schemas/openapi.json#/components/schemas/TokenDetail): the listing fields, then its homepage and description."""
    return {**token_item(r), "homepage_url": r["homepage_url"], "description": r["description"]}


def token_list(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The token listing (schemas/openapi.json#/components/schemas/TokenList) of :func:`token_item` shapes, in the given order."""
    return {"tokens": list(items)}


# --------------------------------------------------------------------------- sentiment pulse (SentimentPulse)


def pulse(counts: Mapping[str, int], as_of: datetime) -> dict[str, Any]:
    """Counts and fractions of the three sentiments over the 24 hours up to ``as_of``; all zero
    when nothing was counted."""
    total = sum(counts.get(s, 0) for s in SENTIMENTS)
    return {
        "window": "24h",
        "as_of": iso_utc(as_of),
        "total_posts": total,
        "breakdown": {
            s: {"count": counts.get(s, 0), "percent": (counts.get(s, 0) / total) if total else 0.0} for s in SENTIMENTS
        },
    }


# --------------------------------------------------------------------------- webhooks (WebhookEndpoint, WebhookAttempt)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else iso_utc(value)


def webhook_endpoint_item(r: ReadRow) -> dict[str, Any]:
    """One endpoint (schemas/openapi.json#/components/schemas/WebhookEndpoint) from its read-model
    row joined with the dispatcher's delivery row (whose columns are None before the dispatcher
    has taken it up). Never its secret: only the generation that signs."""
    disabled = webhook_disabled(r)
    status = "disabled" if disabled else r["status"]
    return {
        "id": r["id"],
        "url": r["url"],
        "description": r["description"],
        "filters": {name: None if r[name] is None else list(r[name]) for name in ("locales", "tickers", "categories")},
        "status": status,
        "disabled_reason": r["disabled_reason"] if disabled else None,
        "disabled_at": _iso(r["disabled_at"]) if disabled else None,
        "failing_since": _iso(r["failing_since"]) if status == "active" else None,
        "next_attempt_at": _iso(r["next_attempt_at"]) if status == "active" else None,
        "attempt": r["attempt"] or 0,
        "delivered": r["delivered"] or 0,
        "last_delivered_at": _iso(r["last_delivered_at"]),
        "cursor": r["cursor"],
        "created_at": iso_utc(r["created_at"]),
        "secret_generation": r["secret_generation"],
    }


def webhook_attempt_item(r: ReadRow) -> dict[str, Any]:
    """One delivery attempt (schemas/openapi.json#/components/schemas/WebhookAttempt)."""
    return {
        "webhook_id": r["webhook_id"],
        "type": r["type"],
        "attempt": r["attempt"],
        "attempted_at": iso_utc(r["attempted_at"]),
        "outcome": r["outcome"],
        "status": r["status"],
        "latency_ms": r["latency_ms"],
        "error": r["error"],
        "next_attempt_at": _iso(r["next_attempt_at"]),
        "response_excerpt": r["response_excerpt"],
    }
