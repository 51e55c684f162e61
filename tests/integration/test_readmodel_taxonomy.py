"""The listed locales (active on the web channel, by position then code), the default locale
chosen from them and the categories, read from a real read model."""

from __future__ import annotations

from tickerwire.services.readmodel.taxonomy import listed_locales, load_categories, load_default_locale

INSERT = """
INSERT INTO locales (code, version, name, native_name, country_code, direction, active, web_channel, is_default, position)
VALUES ($1, 1, $1, $1, 'XX', 'ltr', $2, $3, $4, $5)
"""


async def test_only_active_web_locales_are_listed_in_position_then_code_order(conn):
    for code, active, web, default, position in [
        ("fr-FR", True, True, False, 2),
        ("de-DE", True, True, False, 1),
        ("ar-SA", True, True, False, 2),
        ("it-IT", False, True, True, 0),
        ("es-ES", True, False, False, 0),
    ]:
        await conn.execute(INSERT, code, active, web, default, position)
    rows = await listed_locales(conn)
    assert [r["code"] for r in rows] == ["de-DE", "ar-SA", "fr-FR"]
    assert set(rows[0].keys()) == {"code", "name", "native_name", "country_code", "direction", "is_default"}
    # The flagged default is not listed (inactive): en-US is not listed either, so the first listed.
    assert await load_default_locale(conn) == "de-DE"


async def test_the_default_is_the_listed_flagged_one_else_en_us_else_en_us_when_none(conn):
    assert await load_default_locale(conn) == "en-US"
    await conn.execute(INSERT, "de-DE", True, True, False, 0)
    await conn.execute(INSERT, "en-US", True, True, False, 1)
    assert await load_default_locale(conn) == "en-US"
    await conn.execute(INSERT, "fr-FR", True, True, True, 2)
    assert await load_default_locale(conn) == "fr-FR"


async def test_categories_in_listing_order_with_their_names_decoded(conn):
    insert = (
        "INSERT INTO categories (slug, version, is_group, group_slug, position, names) "
        "VALUES ($1, 1, $2, $3, $4, $5::jsonb)"
    )
    await conn.execute(insert, "markets", True, None, 1, '{"en-US": "Markets"}')
    await conn.execute(insert, "defi", False, "markets", 0, '{"de-DE": "DeFi"}')
    await conn.execute(insert, "btc", False, "markets", 1, "{}")
    assert await load_categories(conn) == [
        {"slug": "defi", "is_group": False, "group_slug": "markets", "position": 0, "names": {"de-DE": "DeFi"}},
        {"slug": "btc", "is_group": False, "group_slug": "markets", "position": 1, "names": {}},
        {"slug": "markets", "is_group": True, "group_slug": None, "position": 1, "names": {"en-US": "Markets"}},
    ]
