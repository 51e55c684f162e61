"""Handlers of the partner endpoints. Each returns bytes the read model already serialized
wherever possible; parameters are validated here and errors raised as :class:`ApiError`."""

from __future__ import annotations

from aiohttp import web

from ..common.db import storage_errors
from . import queries
from .errors import validation_failed
from .state import CATALOG, POOL

JSON = "application/json"
MAX_LIMIT = 50
DEFAULT_LIMIT = 20


def json_bytes(body: bytes, *, cache: str = "private, no-cache") -> web.Response:
    return web.Response(body=body, content_type=JSON, headers={"Cache-Control": cache})


def parse_limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        raise validation_failed("limit", f"limit must be an integer from 1 to {MAX_LIMIT}; got {raw!r}.") from None
    if not 1 <= value <= MAX_LIMIT:
        raise validation_failed("limit", f"limit must be an integer from 1 to {MAX_LIMIT}; got {value}.")
    return value


async def languages(request: web.Request) -> web.Response:
    return json_bytes(request.app[CATALOG].languages.body, cache="public, max-age=30")


async def list_posts(request: web.Request) -> web.Response:
    catalog = request.app[CATALOG]
    lang = catalog.languages.resolve(request.query.get("lang"))
    limit = parse_limit(request.query.get("limit"))
    with storage_errors("list posts"):
        rows = await request.app[POOL].fetch(queries.SELECT_FEED, lang, limit + 1)
    page = rows[:limit]
    next_cursor = f'"{page[-1]["post_id"]}"' if len(rows) > limit else "null"
    body = '{"posts":[' + ",".join(r["lean"] for r in page) + f'],"next_cursor":{next_cursor},"prev_cursor":null}}'
    return json_bytes(body.encode())
