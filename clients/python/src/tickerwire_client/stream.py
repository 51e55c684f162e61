"""``PostStream``: the stream with its partner rules (docs/api.md#stream) applied.

- Connects to ``{ws_url}/stream?key=...`` (plus the opt-in filters ``lang``, ``tickers``,
  ``categories`` when given; a server that ignores them is fine: language and category are
  also checked here).
- Reconnects on close, error or ``silence_timeout`` (60 s, docs/api.md#stream-keepalive) without any
  message, with capped, jittered back-off; a refused handshake for a sixth connection waits
  its ``Retry-After``; a refusal for the key or workspace (401/403, or close 4003) is raised.
- After every connect (the first one too), one gap-fill per locale consumed:
  ``GET /posts?after=<cursor>&lang=<L>`` until the page is empty (docs/api.md#reconnect; the server
  returns the posts right after the cursor, newest first), delivered oldest first.
- Merges pushes and gap-fill pages per locale (see :mod:`tickerwire_client.ordering`):
  every post exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol, TypedDict
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp

from .errors import (
    ApiError,
    BadgeMissing,
    ClientError,
    Forbidden,
    NotAuthenticated,
    StreamLimitReached,
    Throttled,
    TickerwireError,
    TransportError,
    WorkspaceSuspended,
    error_from_response,
)
from .filters import PostFilter, csv_value
from .meta import LogMark, LogPosition
from .models import CategoryTree, LanguageList, Page, PostLean
from .ordering import LocaleLine, StreamPost
from .retry import Backoff

log = logging.getLogger("tickerwire_client.stream")

#: Close code the server uses when access changed while connected; the reason is the error code.
CLOSE_ACCESS_REVOKED = 4003
_REVOKED = {
    "NOT_AUTHENTICATED": NotAuthenticated,
    "WORKSPACE_SUSPENDED": WorkspaceSuspended,
    "BADGE_MISSING": BadgeMissing,
}


class _End:
    """Put in the queue when the stream ends (and put back, so every later read ends too)."""


_END = _End()


@dataclass(slots=True)
class StreamStats:
    connects: int = 0
    reconnects_after_silence: int = 0
    connect_failures: int = 0
    gap_fill_requests: int = 0
    #: Gap-fills put off because the API refused them for the workspace's rate limit or daily
    #: quota (the stream itself counts against neither): pushes flow meanwhile.
    gap_fills_deferred: int = 0
    messages: int = 0


class StreamSource(Protocol):
    """What a stream needs of its client (``AsyncClient`` is one): the WebSocket session and
    address, and the reads of the gap-fill and of the start."""

    key: str
    stream_url: str

    @property
    def session(self) -> aiohttp.ClientSession: ...

    async def posts(
        self,
        where: PostFilter | None = None,
        *,
        lang: str | None = None,
        after: int | str | None = None,
        before: int | str | None = None,
        limit: int | None = None,
    ) -> Page: ...

    async def categories(self, *, lang: str | None = None) -> CategoryTree: ...

    async def languages(self) -> LanguageList: ...


class StreamOptions(TypedDict, total=False):
    """The options of ``client.stream(...)``: the keyword arguments of :class:`PostStream`."""

    langs: Iterable[str] | None
    tickers: Iterable[str] | str | None
    categories: Iterable[str] | str | None
    start_after: int | dict[str, int] | None
    silence_timeout: float
    reorder_window: float
    backoff_base: float
    backoff_cap: float
    connect_timeout: float
    queue_size: int
    server_filters: bool


class _Reconnect(Exception):
    """The current connection is done; connect again after a back-off."""


def bcp47_case(tag: str) -> str:
    """A locale code in the case BCP 47 recommends (codes are case-insensitive; the API
    answers with this case): ``de-de`` is ``de-DE``, ``zh-hans-cn`` is ``zh-Hans-CN``."""
    parts = tag.split("-")
    out = [parts[0].lower()]
    for part in parts[1:]:
        out.append(
            part.upper() if len(part) == 2 else part.title() if len(part) == 4 and part.isalpha() else part.lower()
        )
    return "-".join(out)


def ended(ws: aiohttp.ClientWebSocketResponse, msg: aiohttp.WSMessage) -> None:
    """A close or error frame ends the connection: :class:`_Reconnect`, or the access error of a
    4003 close (access revoked while connected), raised. Any other frame: nothing."""
    if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
        code, reason = ws.close_code, msg.extra if isinstance(msg.extra, str) else ""
        if code == CLOSE_ACCESS_REVOKED:
            cls = _REVOKED.get(reason, Forbidden)
            raise cls(
                401 if cls is NotAuthenticated else 403,
                reason or "ACCESS_REVOKED",
                "the stream was closed: access changed",
            )
        raise _Reconnect(f"closed by the server: {code} {reason}")
    if msg.type == aiohttp.WSMsgType.ERROR:
        raise _Reconnect(f"connection error: {ws.exception()!r}")


async def open_socket(client: StreamSource, url: str, connect_timeout: float) -> aiohttp.ClientWebSocketResponse:
    """The WebSocket of ``url``; a refused handshake raises its :class:`ApiError`."""
    try:
        return await client.session.ws_connect(
            url,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
            autoping=True,
            heartbeat=None,
            max_msg_size=4 * 1024 * 1024,
        )
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status in (401, 403, 404, 422, 429):
            raise await _refusal(client, url, exc, connect_timeout) from None
        raise


async def _refusal(
    client: StreamSource, url: str, exc: aiohttp.WSServerHandshakeError, connect_timeout: float
) -> ApiError:
    """The refusal's JSON envelope (the server refuses without upgrading; aiohttp keeps only
    the status and headers, so the body is asked for again with a plain GET). A 429 at the
    handshake is always the workspace's connection limit: a plain GET cannot show it (the
    slot is only asked for by an upgrade), so it is told by its status and ``Retry-After``."""
    if exc.status == 429:
        headers: Mapping[str, str] = exc.headers or {}
        retry_after = headers.get("Retry-After")
        envelope: dict[str, str | int] = {
            "code": "STREAM_LIMIT_REACHED",
            "message": "the workspace holds its maximum of stream connections",
        }
        if retry_after is not None and retry_after.isdigit():
            envelope["retry_after_sec"] = int(retry_after)
        return error_from_response(429, {"error": envelope}, headers)
    body = None
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        async with client.session.get(
            url.replace("ws", "http", 1), timeout=aiohttp.ClientTimeout(total=connect_timeout)
        ) as resp:
            if resp.status == exc.status:
                body = json.loads(await resp.read())
    return error_from_response(exc.status, body, exc.headers or {})


def saw_push(client: object, mark: LogMark | None) -> None:
    """Tell ``client`` (through its ``saw``, when it has one) that a post at ``mark`` was pushed, so
    that its next reads reflect it (X-Min-Log-Position, docs/api.md#log-positions)."""
    saw = getattr(client, "saw", None)
    if mark is not None and saw is not None:
        saw(mark.reflected_from())


def stream_endpoint(url: str, key: str, params: dict[str, str]) -> str:
    """``url`` (a ``{ws_url}`` with or without ``/stream``) with ``key`` and ``params`` as its query:
    the client's ``key`` wins over a ``key`` in ``url``, which is not sent (docs/api.md#stream-key,
    clients/shared/vectors.json)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/stream"):
        path += "/stream"
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "key" and k not in params]
    query += [("key", key)] + sorted(params.items())
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))


class PostStream:
    """Every new post, exactly once and in order per locale, across reconnects.

    Use as ``async with client.stream(langs=["en-US"]) as stream: async for item in stream``;
    each item is a :class:`~tickerwire_client.ordering.StreamPost` (``item.post`` is the lean post).

    Options:
      langs: locales the application consumes (default: every locale of GET /languages).
      tickers, categories: opt-in filters (passed to the stream and to the gap-fill).
      start_after: the cursor to start from, an id or ``{lang: id}`` (e.g. persisted by the
        application from ``item.post.id``); default: the newest post when the stream starts.
      silence_timeout: reconnect after this many seconds without any message (60).
      reorder_window: how long a push may wait for posts sorting before it (0.5 s).
      backoff_base / backoff_cap: reconnect back-off (0.5 s doubling up to 30 s, jittered).
      connect_timeout: handshake timeout (10 s). queue_size: items buffered for the application
        (the stream is not read while it is full; the server then closes it as slow and the
        client reconnects and gap-fills, losing nothing).
      server_filters: send ``lang``/``tickers``/``categories`` to the stream (True).
    """

    def __init__(
        self,
        client: StreamSource,
        *,
        langs: Iterable[str] | None = None,
        tickers: Iterable[str] | str | None = None,
        categories: Iterable[str] | str | None = None,
        start_after: int | dict[str, int] | None = None,
        silence_timeout: float = 60.0,
        reorder_window: float = 0.5,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        connect_timeout: float = 10.0,
        queue_size: int = 1000,
        server_filters: bool = True,
    ) -> None:
        self.client = client
        langs = [langs] if isinstance(langs, str) else (list(langs) if langs is not None else None)
        # Locale codes are case-insensitive (BCP 47); posts carry them in the recommended case.
        self.langs = list(dict.fromkeys(bcp47_case(lang) for lang in langs)) if langs is not None else None
        self.tickers = csv_value(tickers)
        self.categories = csv_value(categories)
        self.start_after = start_after
        self.silence_timeout = silence_timeout
        self.reorder_window = reorder_window
        self.backoff = Backoff(backoff_base, backoff_cap)
        self.connect_timeout = connect_timeout
        self.server_filters = server_filters
        self.stats = StreamStats()
        self.lines: dict[str, LocaleLine] = {}
        self._leaves: set[str] | None = None
        self._queue: asyncio.Queue[StreamPost | Exception | _End] = asyncio.Queue(maxsize=queue_size)
        self._emit = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        #: Per locale, the newest post the application has taken in order (what ``cursors()`` says).
        self._taken: dict[str, int | None] = {}
        #: Seconds the reader spent waiting for room in the application's queue, not yet
        #: added to the waiting pushes' windows (it did not read the socket meanwhile).
        self._stalled = 0.0

    # ------------------------------------------------------------------ the application's side

    async def __aenter__(self) -> PostStream:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name="tickerwire-stream")

    def __aiter__(self) -> PostStream:
        return self

    async def __anext__(self) -> StreamPost:
        self.start()
        item = await self._queue.get()
        if isinstance(item, _End):
            self._queue.put_nowait(_END)  # and on every later call
            raise StopAsyncIteration
        if isinstance(item, Exception):
            self._queue.put_nowait(_END)
            raise item
        if not item.late:
            self._taken[item.post.lang] = item.post.id
        return item

    async def close(self) -> None:
        """Stop the stream; the iteration ends (posts not yet taken are dropped)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._ws is not None:
            await self._ws.close()
        while True:
            try:
                self._queue.put_nowait(_END)
                return
            except asyncio.QueueFull:
                self._queue.get_nowait()

    def cursors(self) -> dict[str, int | None]:
        """Per locale, the id to resume after: the newest post the application has taken (not
        merely queued) in order, else the starting cursor. Persist it after handling the items
        taken and resume with ``start_after``: no post the application had not taken is skipped."""
        return dict(self._taken)

    # ------------------------------------------------------------------ the supervisor

    async def _supervise(self) -> None:
        try:
            while True:
                try:
                    if not self.lines:
                        await self._prepare()
                    await self._connection()
                except _Reconnect as why:
                    log.info("stream reconnecting: %s", why)
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError, TransportError) as exc:
                    self.stats.connect_failures += 1
                    log.warning("stream connection failed: %s: %s", type(exc).__name__, exc)
                except StreamLimitReached as exc:
                    self.stats.connect_failures += 1
                    log.warning("stream refused: %s", exc)
                    await asyncio.sleep((exc.retry_after or 1.0) + self.backoff.next())
                    continue
                except ApiError as exc:
                    if isinstance(exc, ClientError) and exc.status in (401, 403, 404, 422):
                        raise  # the key, the workspace or the options are wrong: reconnecting cannot help
                    self.stats.connect_failures += 1
                    log.warning("stream gap-fill or handshake failed: %s", exc)
                finally:
                    if self._ws is not None:
                        await self._ws.close()
                        self._ws = None
                await asyncio.sleep(self.backoff.next())
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the application, never swallowed
            await self._queue.put(exc if isinstance(exc, Exception) else TickerwireError(repr(exc)))

    async def _prepare(self) -> None:
        """Locales, the category filter's leaves and the starting cursors."""
        if self.langs is None:
            self.langs = [lang.code for lang in (await self.client.languages()).languages]
        if self.categories:
            tree = await self.client.categories()
            self._leaves = set().union(*(tree.leaves_of(s) for s in self.categories.split(",") if s))
        start: int | Mapping[str, int | None] | None = self.start_after
        if start is None or (isinstance(start, dict) and not set(self.langs) <= set(start)):
            # The newest post now: everything after it is new to the application.
            page = await self.client.posts(limit=1)
            newest = int(page.posts[0].id) if page.posts else None
            start = newest if start is None else {lang: start.get(lang, newest) for lang in self.langs}
        lines = {}
        for lang in self.langs:
            cursor = start.get(lang) if isinstance(start, Mapping) else start
            lines[lang] = LocaleLine(lang, cursor=cursor, window=self.reorder_window)
            self._taken.setdefault(lang, cursor)
        self.lines = lines

    def _url(self) -> str:
        params: dict[str, str] = {}
        if self.server_filters:
            if self.langs:
                params["lang"] = ",".join(self.langs)  # the stream's lang is a list, matched exactly
            if self.tickers:
                params["tickers"] = self.tickers
            if self.categories:
                params["categories"] = self.categories
        return stream_endpoint(self.client.stream_url, self.client.key, params)

    async def _handshake(self) -> aiohttp.ClientWebSocketResponse:
        return await open_socket(self.client, self._url(), self.connect_timeout)

    async def _connection(self) -> None:
        self._ws = ws = await asyncio.wait_for(self._handshake(), self.connect_timeout)
        first = await self._receive(ws, self.silence_timeout)
        if first.get("type") != "ready":
            raise _Reconnect(f"expected ready, got {first.get('type')!r}")
        self.stats.connects += 1
        connected = asyncio.get_running_loop().time()
        for line in self.lines.values():
            line.begin_fill()  # before any push of this connection is handled
        filler = asyncio.create_task(self._gap_fill(), name="tickerwire-gap-fill")
        try:
            await self._read(ws, filler)
        finally:
            if asyncio.get_running_loop().time() - connected >= min(10.0, self.silence_timeout):
                self.backoff.reset()  # a connection that lived: the next attempt starts fast
            filler.cancel()
            await asyncio.gather(filler, return_exceptions=True)
            for line in self.lines.values():
                line.abort_fill()

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse, timeout: float) -> dict[str, Any]:
        try:
            msg = await ws.receive(timeout=timeout)
        except asyncio.TimeoutError:
            self.stats.reconnects_after_silence += 1
            raise _Reconnect(f"no message for {self.silence_timeout} s") from None
        return self._classify(ws, msg)

    def _classify(self, ws: aiohttp.ClientWebSocketResponse, msg: aiohttp.WSMessage) -> dict[str, Any]:
        """A text frame's JSON object; a close or error ends the connection (4003 raises)."""
        if msg.type == aiohttp.WSMsgType.TEXT:
            self.stats.messages += 1
            try:
                body = json.loads(msg.data)
            except ValueError:
                return {}
            return body if isinstance(body, dict) else {}
        ended(ws, msg)
        return {}  # binary frames: nothing for the application

    async def _read(self, ws: aiohttp.ClientWebSocketResponse, filler: asyncio.Task[None]) -> None:
        """Pushes until the connection ends; waiting pushes are released when due."""
        loop = asyncio.get_running_loop()
        silent = 0.0  # seconds spent waiting for a message since the last one (time spent handing
        # posts to a slow application does not count as silence)
        while True:
            if filler.done() and (exc := filler.exception()) is not None:
                raise exc
            silence_left = self.silence_timeout - silent
            if silence_left <= 0:
                self.stats.reconnects_after_silence += 1
                raise _Reconnect(f"no message for {self.silence_timeout} s")
            now = loop.time()
            due = [d for line in self.lines.values() if (d := line.next_due()) is not None]
            wait = min([silence_left, *(max(d - now, 0.0) for d in due)])
            if not filler.done():
                wait = min(wait, 0.2)  # notice a failed gap-fill promptly
            wait = max(wait, 0.005)  # aiohttp reads a zero timeout as "no timeout"
            started = loop.time()
            try:
                msg = await ws.receive(timeout=wait)
            except asyncio.TimeoutError:
                silent += loop.time() - started
                await self._release_due()
                continue
            message = self._classify(ws, msg)
            if msg.type == aiohttp.WSMsgType.TEXT:
                silent = 0.0
            else:
                silent += loop.time() - started
            if message.get("type") == "post.created":
                await self._on_push(message)
            await self._release_due()

    # ------------------------------------------------------------------ merging

    def _wanted(self, post: PostLean) -> LocaleLine | None:
        line = self.lines.get(post.lang)
        if line is None:
            return None
        if self._leaves is not None and not any(c.slug in self._leaves for c in post.categories):
            return None
        return line

    async def _on_push(self, message: dict[str, Any]) -> None:
        try:
            post = PostLean.from_dict(message["data"])
        except (KeyError, TypeError, ValueError) as exc:
            log.error("post.created with an unreadable data field dropped: %r", exc)
            return
        mark = LogMark.parse(message.get("log_position"))
        saw_push(self.client, mark)
        line = self._wanted(post)
        if line is None:
            return
        async with self._emit:
            for item in line.push(post, mark, asyncio.get_running_loop().time()):
                await self._hand(item)

    async def _hand(self, item: StreamPost) -> None:
        """The reader hands ``item`` to the application; time spent waiting for room in a full
        queue is time the socket was not read, so it does not count against a push's window
        (a post waiting in the socket is not late because the application was slow)."""
        if not self._queue.full():
            self._queue.put_nowait(item)
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        await self._queue.put(item)
        self._stalled += loop.time() - started

    async def _release_due(self) -> None:
        async with self._emit:
            if self._stalled:
                for line in self.lines.values():
                    line.postpone(self._stalled)
                self._stalled = 0.0
            now = asyncio.get_running_loop().time()
            for line in self.lines.values():
                for item in line.release(now):
                    await self._hand(item)

    async def _gap_fill(self) -> None:
        """One gap-fill per locale: ``after=<cursor>`` until the page is empty.

        The gap-fill is an API call and counts against the workspace's rate limit and daily
        quota; the stream does not. When the API refuses it for those (429), the locales not
        filled yet stop holding their pushes (the application keeps getting new posts) and the
        gap-fill is tried again, from the same cursors, after ``Retry-After``: the posts of the
        gap then arrive ``late``, never lost. The fill resumes from where it had read to (each
        line's ``fill_cursor``), so a gap longer than one minute's allowance is read over several
        minutes, and a reconnect meanwhile resumes it too. The connection is kept meanwhile."""
        match = PostFilter(ticker=self.tickers or None, category=self.categories or None)
        pending = list(self.lines)
        while pending:
            for lang in list(pending):
                line = self.lines[lang]
                try:
                    await self._fill_line(line, line.fill_cursor, match)
                except Throttled as exc:
                    self.stats.gap_fills_deferred += 1
                    wait = exc.retry_after if exc.retry_after is not None else 60.0
                    log.warning(
                        "stream gap-fill refused (%s); the stream goes on, the gap is filled in %.0f s", exc, wait
                    )
                    for line_ in (self.lines[lang_] for lang_ in pending):
                        line_.abort_fill()  # pushes flow meanwhile; the fill stays owed
                    await asyncio.sleep(wait)
                    for line_ in (self.lines[lang_] for lang_ in pending):
                        line_.begin_fill()  # resumes from where it had read to
                    break
                pending.remove(lang)

    async def _fill_line(self, line: LocaleLine, cursor: int | str | None, match: PostFilter) -> None:
        if cursor is None:
            await self._fill_from_start(line, match)
            return
        after: int | str = cursor
        while True:
            self.stats.gap_fill_requests += 1
            page = await self.client.posts(match, lang=line.lang, after=after, limit=50)
            async with self._emit:
                for item in line.fill_page([p for p in page.posts if self._wanted(p) is line]):
                    await self._queue.put(item)
            if not page.posts or page.prev_cursor is None:
                await self._end_fill(line, page.meta.log_position if page.meta else None)
                return
            after = page.prev_cursor
            line.fill_progress(after)  # delivered up to here: a resumed fill starts after it

    async def _fill_from_start(self, line: LocaleLine, match: PostFilter) -> None:
        """No cursor yet (there were no posts when the stream started): every post is new."""
        posts: list[PostLean] = []
        position: LogPosition | None = None
        before: str | None = None
        for _ in range(200):  # bounded: 10,000 posts
            self.stats.gap_fill_requests += 1
            page = await self.client.posts(match, lang=line.lang, before=before, limit=50)
            position = position or (page.meta.log_position if page.meta else None)
            posts += page.posts
            if not page.posts or page.next_cursor is None:
                break
            before = page.next_cursor
        async with self._emit:
            for item in line.fill_page([p for p in posts if self._wanted(p) is line]):
                await self._queue.put(item)
        await self._end_fill(line, position)

    async def _end_fill(self, line: LocaleLine, position: LogPosition | None) -> None:
        async with self._emit:
            for item in line.end_fill(position, asyncio.get_running_loop().time()):
                await self._queue.put(item)
