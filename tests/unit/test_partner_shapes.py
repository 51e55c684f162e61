"""The partner JSON of languages, categories, tokens and the pulse (services/api/partner.py):
fields in the specification's order, names by the one fallback rule."""

from __future__ import annotations

from datetime import datetime, timezone

from tickerwire.services.api import partner


def _locale(code: str, is_default: bool = False) -> dict:
    return {
        "code": code,
        "name": code + " name",
        "native_name": code + " native",
        "country_code": code[-2:],
        "direction": "rtl" if code.startswith("ar") else "ltr",
        "is_default": is_default,
    }


def test_languages_flag_exactly_the_chosen_default_in_listing_order():
    doc = partner.language_list([_locale("de-DE", True), _locale("ar-SA"), _locale("en-US")], "ar-SA")
    assert [l["code"] for l in doc["languages"]] == ["de-DE", "ar-SA", "en-US"]
    assert [l["is_default"] for l in doc["languages"]] == [False, True, False]  # the chosen one, not the flag
    assert list(doc["languages"][1]) == ["code", "name", "native_name", "country_code", "direction", "is_default"]
    assert doc["languages"][1]["direction"] == "rtl"
    assert partner.language_list([], "en-US") == {"languages": []}


CATEGORIES = [
    {"slug": "markets", "is_group": True, "group_slug": None, "names": {"en-US": "Markets", "de-DE": "Märkte"}},
    {"slug": "defi", "is_group": False, "group_slug": "markets", "names": {"en-US": "DeFi"}},
    {"slug": "tech", "is_group": True, "group_slug": None, "names": {}},
    {"slug": "orphan", "is_group": False, "group_slug": "gone", "names": {"fr-FR": "Orphelin"}},
]


def test_the_category_tree_lists_groups_with_their_leaves_named_in_the_locale_or_by_fallback():
    cats = partner.CategoryShapes(CATEGORIES, "en-US")
    assert cats.tree("de-DE") == {
        "groups": [
            {"slug": "markets", "name": "Märkte", "leaves": [{"slug": "defi", "name": "DeFi"}]},
            {"slug": "tech", "name": "tech", "leaves": []},
        ]
    }


def test_one_category_group_leaf_and_leaf_of_an_unknown_group():
    cats = partner.CategoryShapes(CATEGORIES, "de-DE")
    assert cats.category("markets", "en-US") == {
        "slug": "markets",
        "name": "Markets",
        "is_group": True,
        "group": None,
        "leaves": [{"slug": "defi", "name": "DeFi"}],
    }
    assert cats.category("defi", "fr-FR") == {
        "slug": "defi",
        "name": "DeFi",
        "is_group": False,
        "group": {"slug": "markets", "name": "Märkte"},
        "leaves": None,
    }
    assert cats.category("orphan", "en-US")["group"] is None
    assert cats.category("orphan", "en-US")["name"] == "Orphelin"


TOKEN = {
    "ticker": "btc",
    "name": "Bitcoin",
    "logo_url": None,
    "post_count": 3,
    "market_cap_rank": 1,
    "exchange_listings": ("binance",),
    "categories": ["layer-1"],
    "genesis_date": "2009-01-03",
    "primary_ecosystem": {"slug": "bitcoin"},
    "homepage_url": "https://bitcoin.org",
    "description": "Peer-to-peer",
}


def test_token_listing_item_and_single_token():
    item = partner.token_item(TOKEN)
    assert list(item) == [
        "ticker",
        "name",
        "logo_url",
        "post_count",
        "market_cap_rank",
        "exchange_listings",
        "categories",
        "genesis_date",
        "primary_ecosystem",
    ]
    assert item["exchange_listings"] == ["binance"]
    detail = partner.token_detail(TOKEN)
    assert list(detail) == list(item) + ["homepage_url", "description"]
    assert partner.token_list([item]) == {"tokens": [item]}


def test_pulse_counts_and_fractions():
    as_of = datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    doc = partner.pulse({"BULLISH": 2, "NEUTRAL": 1, "BEARISH": 1}, as_of)
    assert doc["window"] == "24h" and doc["as_of"] == "2024-01-01T12:00:00.123Z" and doc["total_posts"] == 4
    assert list(doc["breakdown"]) == ["BULLISH", "NEUTRAL", "BEARISH"]
    assert doc["breakdown"]["BULLISH"] == {"count": 2, "percent": 0.5}
    assert abs(sum(v["percent"] for v in doc["breakdown"].values()) - 1) < 1e-12
    empty = partner.pulse({}, as_of)
    assert empty["total_posts"] == 0 and all(v == {"count": 0, "percent": 0.0} for v in empty["breakdown"].values())
