"""The listed locales (active on the web channel, by position then code) and the default
locale chosen from them, read from a real read model."""

from __future__ import annotations

from tickerwire.services.readmodel.taxonomy import listed_locales, load_default_locale

INSERT = """
INSERT INTO locales (code, version, name, native_name, country_code, direction, active, web_channel, is_default, position)
VALUES ($1, 1, $1, $1, 'XX', 'ltr', $2, $3, $4, $5)
"""


async def test_only_active_web_locales_are_listed_in_position_then_code_order(conn):
    for code, active, web, default, position in [
        ("fr-FR", True, True, False, 2), ("de-DE", True, True, False, 1), ("ar-SA", True, True, False, 2),
        ("it-IT", False, True, True, 0), ("es-ES", True, False, False, 0),
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
