"""Handlers of the partner endpoints. Each returns bytes the read model (or the catalog cache)
already serialized; parameters are decoded by :mod:`.params` and errors raised as :class:`ApiError`."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Awaitable, Callable, Hashable

import asyncpg
import orjson
from aiohttp import web
from multidict import CIMultiDict

from ..common.db import storage_errors
from ..common.http.envelope import ApiError
from ..common.http.requestlog import WORKSPACE_KEY
from ..readmodel import cursors, stamps as stamp
from ..readmodel.logposition import LogPosition
from ..readmodel.mapping import text_search_config
from ..readmodel.taxonomy import answered_locales
from ..readmodel.walk import Refusal, walk
from . import partner, queries
from .catalog import Body, etag_of
from .errors import not_found
from .freshness import fresh_enough
from .pages import CachedPage
from .params import (
    Filters,
    PageWindow,
    parse_attempts_limit,
    parse_changes,
    text_key,
)
from .state import CATALOG, LISTINGS, PAGES, REPLICAS, REQUEST_LOG_POSITION, SEARCHES, WATCHER, db

JSON = "application/json"
PRIVATE = "private, no-cache"
_ID = re.compile(r"[0-9]{1,16}", re.ASCII)


def json_bytes(body: bytes, *, cache: str = PRIVATE, etag: str | None = None) -> web.Response:
    # The headers as one multidict, Content-Type included: aiohttp would otherwise copy them and
    # parse and re-set the content type for every response.
    if etag is None:
        return web.Response(body=body, headers=CIMultiDict((("Cache-Control", cache), ("Content-Type", JSON))))
    return web.Response(
        body=body, headers=CIMultiDict((("Cache-Control", cache), ("ETag", etag), ("Content-Type", JSON)))
    )


def cached(body: Body, cache: str = PRIVATE) -> web.Response:
    return json_bytes(body.data, cache=cache, etag=body.etag)


def _log_topic(request: web.Request) -> str:
    return request.app[CATALOG].log_topic


def _raw_query(request: web.Request) -> str:
    """The request target's query string as sent (not decoded); empty when there is none."""
    return request.raw_path.partition("?")[2]


def _lang(request: web.Request) -> str:
    # No query string, no lang: skips decoding the query (most catalog and detail requests).
    raw = request.query.get("lang") if _raw_query(request) else None
    return request.app[CATALOG].languages.resolve(raw)


# --------------------------------------------------------------------------- posts and search


def _cursor(value: int | None) -> str:
    return "null" if value is None else f'"{value}"'


async def _cached(request: web.Request, key: Hashable, build: Callable[[], Awaitable[bytes]]) -> web.Response:
    """The body of ``key`` from the page cache, else built (one statement) and kept. The mark
    (X-Log-Position) travels with the body: the one read in the same statement as its data."""
    cache, watcher = request.app[PAGES], request.app[WATCHER]
    usable = watcher.fresh()  # never serve from memory what is not confirmed current
    if usable and watcher.behind(stamp.POSTS):
        await watcher.caught_up(stamp.POSTS)  # a change already pushed to this process is served
    if not usable:
        cache.bypass()
    elif (hit := cache.get(key)) is not None and fresh_enough(request, hit.log_position):
        request[REQUEST_LOG_POSITION] = hit.log_position
        return json_bytes(hit.body, etag=hit.etag)
    generation = cache.generation
    body = await build()
    entry = CachedPage(body, etag_of(body), request[REQUEST_LOG_POSITION])
    if usable and (not request.app[REPLICAS] or _current(request, entry.log_position)):
        cache.put(key, entry, generation)
    return json_bytes(body, etag=entry.etag)


def _current(request: web.Request, mark: LogPosition) -> bool:
    """Whether a page read at ``mark`` holds every change of the cache's generation (a page read
    from a replica that has not replayed the last change is served, never kept)."""
    return mark.covers(request.app[CATALOG].log_position)


async def _page(
    request: web.Request, what: str, lang: str, filters: Filters, page: PageWindow, search: queries.Search | None
) -> web.Response:
    if page.after is None:  # the stream's gap-fill (after=) always reads the database
        return await _cached(
            request,
            ("posts", lang, filters, page, search),
            lambda: _page_body(request, what, lang, filters, page, search),
        )
    return json_bytes(await _page_body(request, what, lang, filters, page, search))


async def _page_body(
    request: web.Request, what: str, lang: str, filters: Filters, page: PageWindow, search: queries.Search | None
) -> bytes:
    sql, args = queries.page_query(lang, filters, page, search, log_topic=_log_topic(request))
    with storage_errors(what):
        rows = await db(request).fetch(sql, *args)
    mark = next((r["lean"] for r in rows if r["kind"] == queries.LOG_POSITION), None)
    if mark is not None:
        request[REQUEST_LOG_POSITION] = LogPosition.stored(mark)
    items = [r for r in rows if r["kind"] == queries.ITEM]
    flags = {r["kind"] for r in rows}
    for kind, name, value in (
        (queries.MISSING_AFTER, "after", page.after),
        (queries.MISSING_BEFORE, "before", page.before),
    ):
        if kind in flags:
            raise ApiError(
                404, "NOT_FOUND", f"The {name} cursor {value} names no post this API has published.", field=name
            )
    next_cursor = items[-1]["post_id"] if items and queries.OLDER in flags else None
    prev_cursor = items[0]["post_id"] if items and queries.NEWER in flags else None
    body = (
        '{"posts":['
        + ",".join(r["lean"] for r in items)
        + f'],"next_cursor":{_cursor(next_cursor)},"prev_cursor":{_cursor(prev_cursor)}}}'
    )
    return body.encode()


async def list_posts(request: web.Request) -> web.Response:
    listing = request.app[LISTINGS].parse(_raw_query(request), lambda: request.query)
    lang = request.app[CATALOG].languages.resolve(listing.lang)
    return await _page(request, "list posts", lang, listing.filters, listing.page, None)


async def search(request: web.Request) -> web.Response:
    listing = request.app[SEARCHES].parse(_raw_query(request), lambda: request.query)
    assert listing.text is not None  # a search listing always has its text
    lang = request.app[CATALOG].languages.resolve(listing.lang)
    return await _page(
        request, "search", lang, listing.filters, listing.page, queries.Search(text_search_config(lang), listing.text)
    )


async def post_detail(request: web.Request) -> web.Response:
    segment = text_key(request.match_info["id_or_slug"])
    if segment is None:
        raise not_found()
    post_id = int(segment) if _ID.fullmatch(segment) and int(segment) <= 2**53 else None
    lang = _lang(request)

    async def build() -> bytes:
        with storage_errors("post detail"):
            row = await db(request).fetchrow(queries.SELECT_DETAIL, lang, post_id, segment, _log_topic(request))
        if row is not None:  # always one row: the statement selects scalar subqueries
            request[REQUEST_LOG_POSITION] = LogPosition.stored(row["log_position"])
        if row is None or row["detail"] is None:
            raise not_found("No visible post has this id or slug in the requested language.")
        return row["detail"].encode()

    return await _cached(request, ("post", lang, segment), build)


# --------------------------------------------------------------------------- changes (docs/resume.md)


async def changes(request: web.Request) -> web.Response:
    """Announcements after a cursor, in announcement order, up to what the projector committed."""
    q = parse_changes(request.query)
    listed = request.app[CATALOG].languages
    with storage_errors("changes"):
        page = await walk(
            # A replica that has not replayed the cursor's marks yet would refuse a cursor just
            # issued: such a read goes to one that has, or to the primary.
            db(request, LogPosition.of(cursors.needs(q.cursor)) if q.cursor is not None else None),
            _log_topic(request),
            q.cursor,
            answered_locales(listed.codes, listed.default),
            limit=q.limit,
            filter=q.filter,
        )
    request[REQUEST_LOG_POSITION] = LogPosition.of(page.frontier)
    if isinstance(page, Refusal):
        if page.code == cursors.EPOCH_CHANGED:
            raise ApiError(409, page.code, page.message, field="cursor")
        raise ApiError(422, "VALIDATION_FAILED", page.message, field="cursor")
    body = (
        '{"posts":['
        + ",".join(item.lean for item in page.items)
        + '],"cursor":"'
        + page.cursor()
        + '","has_more":'
        + ("true" if page.has_more else "false")
        + "}"
    )
    return json_bytes(body.encode())


# --------------------------------------------------------------------------- catalog


async def list_languages(request: web.Request) -> web.Response:
    languages = request.app[CATALOG].languages
    return json_bytes(languages.body, cache="private, max-age=30", etag=languages.etag or None)


async def list_categories(request: web.Request) -> web.Response:
    return cached(request.app[CATALOG].categories.tree_for(_lang(request)))


async def category(request: web.Request) -> web.Response:
    slug = text_key(request.match_info["slug"])
    body = request.app[CATALOG].categories.by_slug.get((slug, _lang(request))) if slug else None
    if body is None:
        raise not_found("No category has this slug.")
    return cached(body)


async def list_tokens(request: web.Request) -> web.Response:
    return cached(request.app[CATALOG].tokens.listing)


async def token(request: web.Request) -> web.Response:
    ticker = text_key(request.match_info["ticker"])
    # Tickers are ASCII: Unicode upper-casing would make aliases of them ("ınj" -> INJ, "ﬁl" -> FIL).
    body = request.app[CATALOG].tokens.by_ticker.get(ticker.upper()) if ticker and ticker.isascii() else None
    if body is None:
        raise not_found("No token has this ticker.")
    return cached(body)


# --------------------------------------------------------------------------- sentiment pulse


async def sentiment_pulse(request: web.Request) -> web.Response:
    # The counts are kept per minute of published_at, so the window is whole minutes: as_of is
    # the current minute, whose posts are counted. It moves once a minute; in between the body,
    # and so its ETag, changes only when a count does, and If-None-Match gets a 304.
    as_of = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    with storage_errors("sentiment pulse"):
        rows: list[asyncpg.Record] = await db(request).fetch(queries.SELECT_PULSE, as_of, _log_topic(request))
    request[REQUEST_LOG_POSITION] = LogPosition.stored(next(r["log_position"] for r in rows if r["sentiment"] is None))
    counts = {r["sentiment"]: r["n"] for r in rows if r["sentiment"] is not None}
    return json_bytes(orjson.dumps(partner.pulse(counts, as_of)))


# --------------------------------------------------------------------------- webhooks (docs/api.md#webhooks)

#: The 404 of an endpoint id that is unknown, removed or another workspace's: the same words, so
#: an answer never tells whether another workspace has an endpoint of that id.
NO_WEBHOOK_ENDPOINT = "No webhook endpoint of this workspace has this id."


def _endpoint_id(request: web.Request) -> str:
    segment = text_key(request.match_info["id"])
    if segment is None:
        raise not_found(NO_WEBHOOK_ENDPOINT)
    return segment


async def _webhook_endpoints(request: web.Request, endpoint_id: str | None) -> list[dict]:
    with storage_errors("webhook endpoints"):
        rows = await db(request).fetch(
            queries.SELECT_WEBHOOK_ENDPOINTS, request[WORKSPACE_KEY], endpoint_id, _log_topic(request)
        )
    request[REQUEST_LOG_POSITION] = LogPosition.stored(rows[0]["log_position"])
    return [partner.webhook_endpoint_item(r) for r in rows if r["id"] is not None]


async def list_webhook_endpoints(request: web.Request) -> web.Response:
    """The caller's workspace's endpoints that are not removed, oldest first."""
    return json_bytes(orjson.dumps({"endpoints": await _webhook_endpoints(request, None)}))


async def webhook_endpoint(request: web.Request) -> web.Response:
    found = await _webhook_endpoints(request, _endpoint_id(request))
    if not found:
        raise not_found(NO_WEBHOOK_ENDPOINT)
    return json_bytes(orjson.dumps(found[0]))


async def webhook_attempts(request: web.Request) -> web.Response:
    """The endpoint's latest delivery attempts, newest first."""
    endpoint_id, limit = _endpoint_id(request), parse_attempts_limit(request.query)
    with storage_errors("webhook attempts"):
        rows = await db(request).fetch(
            queries.SELECT_WEBHOOK_ATTEMPTS, request[WORKSPACE_KEY], endpoint_id, limit, _log_topic(request)
        )
    request[REQUEST_LOG_POSITION] = LogPosition.stored(rows[0]["log_position"])
    if not rows[0]["visible"]:
        raise not_found(NO_WEBHOOK_ENDPOINT)
    attempts = [partner.webhook_attempt_item(r) for r in rows if r["webhook_id"] is not None]
    return json_bytes(orjson.dumps({"attempts": attempts}))
