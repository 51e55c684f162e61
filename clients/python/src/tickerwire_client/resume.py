"""``ResumingStream``: the stream resumed with a cursor, so no post is missed and none repeated.

The server gives every ``post.created`` a cursor (``cursors=true``) and, on a reconnect with
``resume=<cursor>``, first replays every announcement after it (a translation added later to
an older post and a backdated post included, however long the disconnect), then goes on live
with no gap and no duplicate (the server's docs/resume.md). So this stream:

- reads the socket only when the application asks for the next item, and hands it over with
  its cursor: the position it reports (:attr:`ResumingStream.position`) is always the last item
  the application took, never one merely buffered;
- after any disconnect (close, error, 60 s of silence), reconnects with ``resume=`` that
  position. Duplicates are impossible by construction: nothing is filtered after the fact.
- only when the server refuses the cursor (``ready.resumed: false``: the log was reset, or the
  cursor is not one the server issued; or a 422 on ``resume``: not a cursor at all) falls back to the basic gap-fill (docs/api.md#reconnect) (``GET /posts?after=<last id>`` per locale),
  says so (a WARNING log, :attr:`ResumeStats.refused`, the ``on_refused`` callback and the
  items' ``source == "gap_fill"``), then follows the new cursor. Only in that fallback may a
  post the application already had come again.

Persist ``stream.position.to_json()`` after handling an item; start a later process with
``resume_from=ResumePoint.from_json(saved)``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, TypedDict

import aiohttp

from .errors import ApiError, ClientError, StreamLimitReached, TransportError
from .filters import PostFilter, csv_value
from .meta import LogMark
from .models import PostLean
from .retry import Backoff
from .stream import StreamSource, _Reconnect, bcp47_case, ended, open_socket, saw_push, stream_endpoint

log = logging.getLogger("tickerwire_client.resume")

#: The gap-fill after a refused cursor reads at most this many pages per locale.
MAX_FILL_PAGES = 200


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where to resume: the cursor of the last item taken and, per locale, the id of the last
    post taken (used only if the server refuses the cursor)."""

    cursor: str | None = None
    after: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"cursor": self.cursor, "after": self.after}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ResumePoint:
        raw = json.loads(text)
        return cls(raw.get("cursor"), {str(k): int(v) for k, v in (raw.get("after") or {}).items()})


@dataclass(frozen=True, slots=True)
class ResumedPost:
    """One post as the application receives it from a :class:`ResumingStream`."""

    post: PostLean
    #: ``"stream"`` (replayed or live: exactly once) or ``"gap_fill"`` (the fallback after a
    #: refused cursor, read with ``GET /posts?after=``).
    source: Literal["stream", "gap_fill"]
    #: The position after this item (also ``stream.position`` once it is taken).
    position: ResumePoint


class ResumeOptions(TypedDict, total=False):
    """The options of ``client.resuming_stream(...)``: the keyword arguments of :class:`ResumingStream`."""

    resume_from: ResumePoint | str | None
    langs: Iterable[str] | None
    tickers: Iterable[str] | str | None
    categories: Iterable[str] | str | None
    silence_timeout: float
    backoff_base: float
    backoff_cap: float
    connect_timeout: float
    on_refused: Callable[[str, str], None] | None


@dataclass(slots=True)
class ResumeStats:
    connects: int = 0
    #: Connections that resumed from a cursor (the server replayed what was missed).
    resumed: int = 0
    #: Cursors the server refused (``resumed: false``): the fallback gap-fill ran.
    refused: int = 0
    reconnects_after_silence: int = 0
    connect_failures: int = 0
    gap_fill_posts: int = 0
    messages: int = 0


class ResumingStream:
    """Every new post exactly once across reconnects and restarts, resumed with cursors.

    Use as ``async with client.resuming_stream(resume_from=saved) as stream: async for item in
    stream``. Options: ``langs``, ``tickers``, ``categories`` (the stream's opt-in filters, sent
    to the server; the fallback gap-fill uses them too), ``silence_timeout`` (60 s),
    ``backoff_base``/``backoff_cap``, ``connect_timeout``, and ``on_refused(code, message)``,
    called when the server refuses the cursor (before the fallback gap-fill).
    """

    def __init__(
        self,
        client: StreamSource,
        *,
        resume_from: ResumePoint | str | None = None,
        langs: Iterable[str] | None = None,
        tickers: Iterable[str] | str | None = None,
        categories: Iterable[str] | str | None = None,
        silence_timeout: float = 60.0,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        connect_timeout: float = 10.0,
        on_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        self.client = client
        self.position = resume_from if isinstance(resume_from, ResumePoint) else ResumePoint(resume_from)
        langs = [langs] if isinstance(langs, str) else (list(langs) if langs is not None else None)
        self.langs = list(dict.fromkeys(bcp47_case(lang) for lang in langs)) if langs is not None else None
        self.tickers = csv_value(tickers)
        self.categories = csv_value(categories)
        self.silence_timeout = silence_timeout
        self.backoff = Backoff(backoff_base, backoff_cap)
        self.connect_timeout = connect_timeout
        self.on_refused = on_refused
        self.stats = ResumeStats()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        #: The fallback gap-fill's posts, oldest first, handed over before the socket is read again.
        self._filled: list[PostLean] = []
        #: The cursor the connection went on live from after a refusal, taken once the fill is.
        self._after_fill: str | None = None
        #: (id, lang) the fallback gap-fill handed over that the new connection may push again.
        self._overlap: set[tuple[int, str]] = set()
        self._closed = False

    async def __aenter__(self) -> ResumingStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> ResumingStream:
        return self

    async def connect(self) -> None:
        """Connect now (else the first item asked for does): from here on nothing is missed,
        and ``position`` holds the cursor of this point."""
        if self._ws is None:
            await self._connect()

    async def close(self) -> None:
        self._closed = True
        await self._drop()

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()

    async def __anext__(self) -> ResumedPost:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._filled:
                return self._take(self._filled.pop(0), "gap_fill", None)
            if self._after_fill is not None:
                self.position = ResumePoint(self._after_fill, self.position.after)
                self._after_fill = None
            try:
                if self._ws is None:
                    await self._connect()
                    continue
                message = await self._receive(self._ws)
            except _Reconnect as why:
                log.info("resuming stream reconnecting: %s", why)
                await self._drop()
                await asyncio.sleep(self.backoff.next())
                continue
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, TransportError, StreamLimitReached) as exc:
                self.stats.connect_failures += 1
                log.warning("resuming stream connection failed: %s: %s", type(exc).__name__, exc)
                await self._drop()
                await asyncio.sleep(getattr(exc, "retry_after", None) or self.backoff.next())
                continue
            except ApiError as exc:
                if isinstance(exc, ClientError) and exc.status in (401, 403, 404, 422):
                    raise  # the key, the workspace or the options are wrong: reconnecting cannot help
                self.stats.connect_failures += 1
                log.warning("resuming stream gap-fill or handshake failed: %s", exc)
                await self._drop()
                await asyncio.sleep(self.backoff.next())
                continue
            if message.get("type") != "post.created":
                continue
            post = PostLean.from_dict(message["data"])
            saw_push(self.client, LogMark.parse(message.get("log_position")))
            if (post.id, post.lang) in self._overlap:
                self._overlap.discard((post.id, post.lang))
                self.position = ResumePoint(message["cursor"], self.position.after)
                continue
            return self._take(post, "stream", message["cursor"])

    def _take(self, post: PostLean, source: Literal["stream", "gap_fill"], cursor: str | None) -> ResumedPost:
        after = {**self.position.after, post.lang: post.id}
        self.position = ResumePoint(cursor if cursor is not None else self.position.cursor, after)
        return ResumedPost(post, source, self.position)

    async def _connect(self) -> None:
        try:
            ready = await self._open(self.position.cursor)
        except ClientError as exc:
            if not (self.position.cursor and exc.status == 422 and exc.field == "resume"):
                raise
            # A saved cursor the server cannot read at all (damaged where it was kept): refused
            # like one it did not issue, so the connection starts afresh and the gap is filled.
            ready = {**await self._open(None), "resumed": False, "reason": {"code": exc.code, "message": exc.message}}
        self.stats.connects += 1
        self.backoff.reset()
        if self.position.cursor is None:
            self.position = ResumePoint(ready["cursor"], self.position.after)
        elif ready.get("resumed") is False:
            await self._refused(ready)
        else:
            self.stats.resumed += 1

    async def _open(self, cursor: str | None) -> dict[str, Any]:
        """Connect, resuming from ``cursor`` (else with ``cursors=true``); the ``ready`` received."""
        params: dict[str, str] = {"resume": cursor} if cursor else {"cursors": "true"}
        if self.langs:
            params["lang"] = ",".join(self.langs)
        if self.tickers:
            params["tickers"] = self.tickers
        if self.categories:
            params["categories"] = self.categories
        url = stream_endpoint(self.client.stream_url, self.client.key, params)
        self._ws = ws = await asyncio.wait_for(
            open_socket(self.client, url, self.connect_timeout), self.connect_timeout
        )
        ready = await self._receive(ws)
        if ready.get("type") != "ready" or "cursor" not in ready:
            raise _Reconnect(f"expected ready with a cursor, got {ready.get('type')!r}")
        return ready

    async def _refused(self, ready: dict[str, Any]) -> None:
        """The server refused the cursor: the basic gap-fill (docs/api.md#reconnect) from the last ids, then the new cursor."""
        reason = ready.get("reason") or {}
        code, message = str(reason.get("code", "")), str(reason.get("message", ""))
        self.stats.refused += 1
        log.warning(
            "the stream refused the resume cursor (%s: %s); filling the gap with GET /posts?after= "
            "(posts the application already had may come again)",
            code,
            message,
        )
        if self.on_refused is not None:
            self.on_refused(code, message)
        langs = self.langs or [lang.code for lang in (await self.client.languages()).languages]
        match = PostFilter(ticker=self.tickers or None, category=self.categories or None)
        filled: list[PostLean] = []
        for lang in langs:
            after: int | str | None = self.position.after.get(lang)
            for _ in range(MAX_FILL_PAGES if after is not None else 0):
                page = await self.client.posts(match, lang=lang, after=after, limit=50)
                filled += page.posts
                if not page.posts or page.prev_cursor is None:
                    break
                after = page.prev_cursor
        filled.sort(key=lambda p: (p.published_at, p.id))
        self.stats.gap_fill_posts += len(filled)
        self._filled = filled
        self._overlap = {(p.id, p.lang) for p in filled}
        self._after_fill = ready["cursor"]

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
        try:
            msg = await ws.receive(timeout=self.silence_timeout)
        except asyncio.TimeoutError:
            self.stats.reconnects_after_silence += 1
            raise _Reconnect(f"no message for {self.silence_timeout} s") from None
        if msg.type == aiohttp.WSMsgType.TEXT:
            self.stats.messages += 1
            body = json.loads(msg.data)
            return body if isinstance(body, dict) else {}
        ended(ws, msg)  # a close or an error raises
        return {}
