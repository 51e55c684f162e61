"""The taxonomy as the projector and the API read it: the listed locales and the categories.

A locale is listed when it is active on the web channel, in listing order (position, then
code). The API lists exactly these (``/languages``) and the default locale is chosen from them
by :func:`.mapping.default_locale`, for the API's fallbacks and for the
category names the projector renders into posts alike. The categories are read once here too,
so the names in posts (projector) and in ``/categories`` (API) come from the same rows.
"""

from __future__ import annotations

from typing import Any, Iterable

import orjson

from ..common.db import Queryable
from .mapping import default_locale

_SELECT_LISTED_LOCALES = """
SELECT code, name, native_name, country_code, direction, is_default
FROM locales
WHERE active AND web_channel
ORDER BY position, code
"""

_SELECT_CATEGORIES = "SELECT slug, is_group, group_slug, position, names FROM categories ORDER BY position, slug"


async def listed_locales(db: Queryable) -> list:
    """The listed locales' rows (code, name, native_name, country_code, direction, is_default)."""
    return await db.fetch(_SELECT_LISTED_LOCALES)


def answered_locales(codes: Iterable[str], default: str) -> frozenset[str]:
    """The locales the API answers in, lower-cased (tags compare case-insensitively): the listed
    ones and the default (en-US when none is listed). A ``lang`` outside them falls back to the
    default, so a translation in another locale is never served as itself."""
    return frozenset(code.lower() for code in codes) | {default.lower()}


async def served_locales(db: Queryable) -> frozenset[str]:
    """:func:`answered_locales` of the listed locales, read now."""
    rows = await listed_locales(db)
    return answered_locales((r["code"] for r in rows), default_locale((r["code"], r["is_default"]) for r in rows))


async def load_default_locale(db: Queryable) -> str:
    """The read model's default locale now."""
    return default_locale((r["code"], r["is_default"]) for r in await listed_locales(db))


async def load_categories(db: Queryable) -> list[dict[str, Any]]:
    """Every category (slug, is_group, group_slug, position, names) in listing order (position,
    then slug), ``names`` (locale -> name) decoded."""
    return decode_categories(await category_rows(db))


async def category_rows(db: Queryable) -> list:
    """The rows :func:`load_categories` decodes, as read (equal rows, equal categories)."""
    return await db.fetch(_SELECT_CATEGORIES)


def decode_categories(rows: list) -> list[dict[str, Any]]:
    """:func:`load_categories` of ``rows`` read by :func:`category_rows`."""
    return [{**r, "names": orjson.loads(r["names"])} for r in rows]
