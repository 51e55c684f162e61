"""``AsyncClient``: every operation of the developer API (``OPERATIONS``), typed, with bounded retries."""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import Any, AsyncIterator, Awaitable, Callable, Literal, Mapping, TypeVar, Unpack
from urllib.parse import quote

import aiohttp

from .errors import ApiError, TransportError, error_from_response
from .filters import CSV, PostFilter, PostFilterArgs, csv_value, page_params
from .meta import LogPosition, ResponseMeta
from .models import (
    Category,
    CategoryTree,
    ChangesPage,
    LanguageList,
    Page,
    PostDetail,
    PostLean,
    SentimentPulse,
    TokenDetail,
    TokenList,
)
from .resume import ResumeOptions, ResumingStream
from .retry import RetryPolicy
from .stream import PostStream, StreamOptions
from .webhook_calls import WebhookCalls

T = TypeVar("T")
PagingDirection = Literal["older", "newer"]
Cursor = int | str | None
#: Fetches one page at the cursors ``before`` / ``after``.
PageFetch = Callable[[Cursor, Cursor], Awaitable[Page]]

USER_AGENT = "tickerwire-client-python/0.1"


def http_to_ws(url: str) -> str:
    if url.startswith("https://"):
        return "wss://" + url[len("https://") :]
    if url.startswith("http://"):
        return "ws://" + url[len("http://") :]
    return url


class AsyncClient(WebhookCalls):
    """The developer API over aiohttp: every operation of schemas/openapi.json (``OPERATIONS``
    names the method of each), the webhook endpoint operations among them (:class:`WebhookCalls`).

    ``base_url`` ends in ``/api/v1/developer``. ``stream_url`` is the stream's ``{ws_url}``
    (the same path over ``ws``/``wss``, with or without the trailing ``/stream``; any
    ``key`` in it is replaced by ``key``); by default it is ``base_url`` over ``ws``/``wss``.
    Every call returns a typed model whose ``meta`` carries that response's status, limit
    headers and consistency mark; an ``ApiError`` carries its own. Nothing is kept on the
    client between calls, so concurrent calls never see each other's meta.
    """

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        stream_url: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 15.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.stream_url = stream_url or http_to_ws(self.base_url)
        self.key = key
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self._session = session
        self._owns_session = session is None
        self._closed = False
        self._streams: weakref.WeakSet[PostStream | ResumingStream] = weakref.WeakSet()
        #: Retries made so far (429/503 or connection errors), for observability.
        self.retries = 0
        #: The freshest consistency mark seen (responses' X-Log-Position, pushed posts'
        #: log_position + 1: docs/api.md#log-positions), sent as X-Min-Log-Position: no later
        #: read answers from older data, whichever server (or database replica) serves it.
        self.min_position: dict[int, int] = {}

    # ------------------------------------------------------------------ lifecycle

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the client is closed")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"User-Agent": USER_AGENT},
            )
            self._owns_session = True
        return self._session

    async def close(self) -> None:
        """Close every stream opened through this client, then the HTTP session."""
        self._closed = True
        for stream in list(self._streams):
            await stream.close()
        if self._owns_session and self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ the HTTP seam

    async def request(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        method: str = "GET",
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = True,
    ) -> tuple[Any, ResponseMeta]:
        """``method path`` with bounded retries; the decoded body and its meta, or an ``ApiError``.

        ``body`` is sent as compact JSON. A request that is not ``idempotent`` (one that would
        act twice if sent twice) is retried only after a 429, which the server answers before
        acting; never after a connection error, a timeout or another status, since the first
        attempt may have been carried out.
        """
        url = self.base_url + path
        sent = {"Authorization": f"Bearer {self.key}", "Accept": "application/json", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            sent["Content-Type"] = "application/json"
        if (mark := self.min_log_position()) is not None:
            sent["X-Min-Log-Position"] = mark
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry.max_call_time
        attempt, waited = 0, 0.0
        while True:
            attempt += 1
            timeout = aiohttp.ClientTimeout(total=max(min(self.timeout, deadline - loop.time()), 0.001))
            try:
                async with self.session.request(
                    method,
                    url,
                    params=params or None,
                    data=data,
                    headers=sent,
                    timeout=timeout,
                    skip_auto_headers=() if data is not None else ("Content-Type",),
                ) as resp:
                    raw = await resp.read()
                    meta = ResponseMeta.from_headers(resp.status, resp.headers)
                    if meta.log_position is not None:
                        self.saw(meta.log_position.offsets)
                    decoded = _decode(raw)
                    if resp.status < 400:
                        return decoded, meta
                    error = error_from_response(resp.status, decoded, resp.headers, meta)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                failure: Exception = TransportError(f"{method} {path}: {type(exc).__name__}: {exc}")
                failure.__cause__ = exc
                retried = self.retry.retry_connection_errors and idempotent
                delay = self.retry.delay(attempt, None, waited) if retried else None
            else:
                failure = error
                retried = error.status in self.retry.retry_statuses and (idempotent or error.status == 429)
                delay = self.retry.delay(attempt, error.retry_after, waited) if retried else None
            if delay is None or loop.time() + delay >= deadline:  # no retry, or no time left for one
                raise failure
            self.retries += 1
            waited += delay
            await asyncio.sleep(delay)

    def min_log_position(self) -> str | None:
        """The X-Min-Log-Position this client sends (:attr:`min_position`), or None for none."""
        return str(LogPosition(self.min_position)) if self.min_position else None

    def saw(self, offsets: Mapping[int, int]) -> None:
        """Raise :attr:`min_position` to ``offsets`` (per partition, the next offset reflected)."""
        for partition, offset in offsets.items():
            if offset > self.min_position.get(partition, 0):
                self.min_position[partition] = offset

    async def _get(
        self, path: str, parse: Callable[[Any, ResponseMeta], T], params: Mapping[str, str] | None = None
    ) -> T:
        return await self._call("GET", path, parse, params)

    async def _call(
        self,
        method: str,
        path: str,
        parse: Callable[[Any, ResponseMeta], T],
        params: Mapping[str, str] | None = None,
        *,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = True,
    ) -> T:
        decoded, meta = await self.request(
            path, params, method=method, body=body, headers=headers, idempotent=idempotent
        )
        try:
            return parse(decoded, meta)
        except (KeyError, TypeError, ValueError) as exc:
            raise ApiError(
                meta.status,
                "UNEXPECTED_BODY",
                f"{method} {path}: the body does not match the contract: {exc!r}",
                meta=meta,
                body=decoded,
            ) from exc

    # ------------------------------------------------------------------ endpoints

    async def posts(
        self,
        where: PostFilter | None = None,
        *,
        lang: str | None = None,
        after: Cursor = None,
        before: Cursor = None,
        limit: int | None = None,
        **filters: Unpack[PostFilterArgs],
    ) -> Page:
        """GET /posts: newest first. ``after`` gives the posts right after the cursor (newer),
        ``before`` the older ones. ``where`` (a :class:`PostFilter`) or the same fields as
        keywords narrow the list; a keyword overrides the field of ``where``."""
        params = page_params(lang, limit, after, before) | PostFilter.of(where, filters).params()
        return await self._get("/posts", Page.from_dict, params)

    async def post(self, id_or_slug: int | str, *, lang: str | None = None) -> PostDetail:
        """GET /posts/{id_or_slug}."""
        return await self._get(f"/posts/{quote(str(id_or_slug), safe='')}", PostDetail.from_dict, page_params(lang))

    async def categories(self, *, lang: str | None = None) -> CategoryTree:
        """GET /categories: groups and their leaves."""
        return await self._get("/categories", CategoryTree.from_dict, page_params(lang))

    async def category(self, slug: str, *, lang: str | None = None) -> Category:
        """GET /categories/{slug}: a group or a leaf."""
        return await self._get(f"/categories/{quote(slug, safe='')}", Category.from_dict, page_params(lang))

    async def tokens(self) -> TokenList:
        """GET /tokens: every token in one response."""
        return await self._get("/tokens", TokenList.from_dict)

    async def token(self, ticker: str) -> TokenDetail:
        """GET /tokens/{ticker} (case-insensitive)."""
        return await self._get(f"/tokens/{quote(ticker, safe='')}", TokenDetail.from_dict)

    async def sentiment_pulse(self) -> SentimentPulse:
        """GET /sentiment-pulse: the 24 h aggregate."""
        return await self._get("/sentiment-pulse", SentimentPulse.from_dict)

    async def languages(self) -> LanguageList:
        """GET /languages."""
        return await self._get("/languages", LanguageList.from_dict)

    async def search(
        self,
        q: str,
        where: PostFilter | None = None,
        *,
        lang: str | None = None,
        after: Cursor = None,
        before: Cursor = None,
        limit: int | None = None,
        **filters: Unpack[PostFilterArgs],
    ) -> Page:
        """GET /search: ranked best first; the /posts filters apply (``where`` or keywords)."""
        params = {"q": q} | page_params(lang, limit, after, before) | PostFilter.of(where, filters).params()
        return await self._get("/search", Page.from_dict, params)

    async def changes(
        self,
        cursor: str | None = None,
        *,
        lang: CSV = None,
        tickers: CSV = None,
        categories: CSV = None,
        limit: int | None = None,
    ) -> ChangesPage:
        """GET /changes: the announcements after the resume ``cursor`` (docs/resume.md), in the
        order posts became visible, and the cursor after them. No cursor: the current head (an
        empty page and its cursor). The filters are the stream's (``lang`` a list of locales).
        ``CursorEpochChanged`` (409): the cursor is of an earlier log; ``ValidationFailed``
        with ``field == "cursor"``: not a cursor this server could have issued."""
        params = {
            "cursor": cursor,
            "lang": csv_value(lang),
            "tickers": csv_value(tickers),
            "categories": csv_value(categories),
            "limit": None if limit is None else str(limit),
        }
        return await self._get("/changes", ChangesPage.from_dict, {k: v for k, v in params.items() if v is not None})

    # ------------------------------------------------------------------ every page

    async def iter_changes(
        self,
        cursor: str | None = None,
        *,
        lang: CSV = None,
        tickers: CSV = None,
        categories: CSV = None,
        limit: int | None = 50,
    ) -> AsyncIterator[ChangesPage]:
        """Every page of ``GET /changes`` from ``cursor``, each page's cursor passed to the next,
        until ``has_more`` is false: that last page (perhaps empty) is yielded too, so the last
        ``page.cursor`` is where to poll from later. Persist ``page.cursor`` after handling a
        page's posts: resuming from it repeats nothing and misses nothing."""
        while True:
            page = await self.changes(cursor, lang=lang, tickers=tickers, categories=categories, limit=limit)
            yield page
            if not page.has_more:
                return
            cursor = page.cursor

    def iter_posts(
        self,
        where: PostFilter | None = None,
        *,
        direction: PagingDirection = "older",
        lang: str | None = None,
        after: Cursor = None,
        before: Cursor = None,
        limit: int | None = 50,
        **filters: Unpack[PostFilterArgs],
    ) -> AsyncIterator[PostLean]:
        """Every post, page after page.

        ``direction="older"`` (default) starts at the newest post (or ``before``) and yields
        newest first until the oldest. ``direction="newer"`` starts right after the
        cursor ``after`` (required) and yields oldest first until the newest; posts published
        while it runs are included.
        """
        match = PostFilter.of(where, filters)

        def fetch(before: Cursor, after: Cursor) -> Awaitable[Page]:
            return self.posts(match, lang=lang, limit=limit, before=before, after=after)

        return _iterate(fetch, direction, after, before)

    def iter_search(
        self,
        q: str,
        where: PostFilter | None = None,
        *,
        direction: PagingDirection = "older",
        lang: str | None = None,
        after: Cursor = None,
        before: Cursor = None,
        limit: int | None = 50,
        **filters: Unpack[PostFilterArgs],
    ) -> AsyncIterator[PostLean]:
        """Every search result in rank order (``"older"``: best first), or in reverse rank
        order from the cursor ``after`` (``"newer"``)."""
        match = PostFilter.of(where, filters)

        def fetch(before: Cursor, after: Cursor) -> Awaitable[Page]:
            return self.search(q, match, lang=lang, limit=limit, before=before, after=after)

        return _iterate(fetch, direction, after, before)

    # ------------------------------------------------------------------ the stream

    def stream(self, **options: Unpack[StreamOptions]) -> PostStream:
        """A :class:`~tickerwire_client.stream.PostStream` over this client (see its options);
        closing the client closes it."""
        stream = PostStream(self, **options)
        self._streams.add(stream)
        return stream

    def resuming_stream(self, **options: Unpack[ResumeOptions]) -> ResumingStream:
        """A :class:`~tickerwire_client.resume.ResumingStream` over this client: resumed with the
        server's cursors, so nothing is missed or repeated across reconnects and restarts."""
        stream = ResumingStream(self, **options)
        self._streams.add(stream)
        return stream


async def _iterate(
    fetch: PageFetch, direction: PagingDirection, after: Cursor, before: Cursor
) -> AsyncIterator[PostLean]:
    if direction == "older":
        cursor = before
        while True:
            page = await fetch(cursor, None)
            for post in page.posts:
                yield post
            if not page.posts or page.next_cursor is None:
                return
            cursor = page.next_cursor
    elif direction == "newer":
        if after is None:
            raise ValueError('direction="newer" needs a cursor: pass after=<post id>')
        cursor = after
        while True:
            page = await fetch(None, cursor)
            for post in reversed(page.posts):
                yield post
            if not page.posts or page.prev_cursor is None:
                return
            cursor = page.prev_cursor
    else:
        raise ValueError(f'direction must be "older" or "newer", not {direction!r}')


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None
