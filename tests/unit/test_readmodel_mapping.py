"""The pure mapping event -> rows / lean post: field order, localization, visibility."""

from datetime import datetime, timezone

import orjson

from tickerwire.schemas.models import Category, Post, PostV2
from tickerwire.services.readmodel.mapping import (
    Taxonomy,
    category_name,
    default_locale,
    iso_utc,
    lean_post,
    text_search_config,
    translation_rows,
)
from tickerwire.services.readmodel.upcast import post_v2

T = datetime(2026, 11, 20, 12, 30, 45, 123456, tzinfo=timezone.utc)

LEAN_FIELDS = [
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
]
DETAIL_EXTRA = ["body", "og_image_url", "gallery_urls", "tags", "hashtags", "byline", "source_url"]


def taxonomy():
    return Taxonomy(
        {
            "markets": Category(
                slug="markets",
                is_group=True,
                group_slug=None,
                position=0,
                names={"en-US": "Markets", "de-DE": "Märkte"},
            ),
            "spot": Category(
                slug="spot", is_group=False, group_slug="markets", position=1, names={"en-US": "Spot", "de-DE": "Kassa"}
            ),
        },
        "en-US",
    )


def post(status="published", **kw) -> PostV2:
    """A post as the mapping reads it: version 1, upcast (services/readmodel/upcast.py)."""
    doc = dict(
        id=42,
        status=status,
        published_at=T if status in ("published", "partial") else None,
        importance=70,
        sentiment="BULLISH",
        tickers=["BTC"],
        hashtags=["Bitcoin"],
        categories=["spot"],
        cover_image_url="https://img.example/c.jpg",
        og_image_url="https://img.example/o.jpg",
        gallery_urls=["https://img.example/g1.jpg"],
        source_url="https://src.example/a",
        byline="Ada",
        translations=[
            dict(
                lang="en-US",
                slug="btc-up",
                canonical_url="https://n.example/en-US/btc-up",
                title="BTC up",
                lede="It rose.",
                body="One.\n\nTwo.",
                tags=["btc"],
            ),
            dict(
                lang="de-DE",
                slug="btc-steigt",
                canonical_url="https://n.example/de-DE/btc-steigt",
                title="BTC steigt",
                lede="Er stieg.",
                body="Eins.\n\nZwei.",
                tags=[],
            ),
        ],
    )
    doc.update(kw)
    return post_v2(Post.model_validate(doc))


def test_lean_has_exactly_the_spec_fields_in_order():
    p = post()
    assert list(lean_post(p, p.translations[0], taxonomy())) == LEAN_FIELDS


def test_detail_is_lean_plus_detail_fields():
    row = translation_rows(post(), taxonomy())[0]
    assert list(orjson.loads(row.detail)) == LEAN_FIELDS + DETAIL_EXTRA
    assert orjson.loads(row.lean) == {k: orjson.loads(row.detail)[k] for k in LEAN_FIELDS}


def test_category_names_are_localized_with_default_fallback():
    rows = {r.lang: orjson.loads(r.lean) for r in translation_rows(post(), taxonomy())}
    assert rows["de-DE"]["categories"] == [{"slug": "spot", "name": "Kassa"}]
    assert rows["en-US"]["categories"] == [{"slug": "spot", "name": "Spot"}]
    p = post(
        translations=[dict(lang="fr-FR", slug="x", canonical_url="https://n.example/x", title="t", lede="l", body="b")]
    )
    assert orjson.loads(translation_rows(p, taxonomy())[0].lean)["categories"][0]["name"] == "Spot"


def test_filter_slugs_include_the_leaf_group():
    assert translation_rows(post(), taxonomy())[0].category_slugs == ("spot", "markets")


def test_only_published_and_partial_are_visible():
    assert all(r.visible for r in translation_rows(post("partial"), taxonomy()))
    assert not any(r.visible for r in translation_rows(post("queued"), taxonomy()))
    assert not any(r.visible for r in translation_rows(post("retracted", published_at=T), taxonomy()))


def test_timestamps_are_utc_with_z_and_millis():
    assert iso_utc(T) == "2026-11-20T12:30:45.123Z"


def test_text_search_config_per_language():
    assert text_search_config("en-US") == "english"
    assert text_search_config("de-DE") == "german"
    assert text_search_config("ja-JP") == "simple"


def test_default_locale_is_the_flagged_one_else_en_us_else_the_first_listed():
    assert default_locale([("de-DE", False), ("fr-FR", True), ("es-ES", True)]) == "fr-FR"
    assert default_locale([("de-DE", False), ("en-US", False)]) == "en-US"
    assert default_locale([("fr-FR", False), ("de-DE", False)]) == "fr-FR"
    assert default_locale([]) == "en-US"


def test_category_name_falls_back_to_the_default_locale_then_the_first_name_then_the_slug():
    names = {"fr-FR": "Marchés", "en-US": "Markets"}
    assert category_name(names, "markets", "fr-FR", "en-US") == "Marchés"
    assert category_name(names, "markets", "de-DE", "en-US") == "Markets"
    assert category_name(names, "markets", "de-DE", "es-ES") == "Marchés"
    assert category_name({}, "markets", "de-DE", "en-US") == "markets"
