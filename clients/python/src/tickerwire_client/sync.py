"""``Client``: the synchronous face of :class:`AsyncClient`.

It runs an ``AsyncClient`` on a private event loop in a daemon thread and waits for each
call, so sync and async behave identically (same retries, models, errors and stream rules)
with no second HTTP library. Safe to use from several threads; not from inside a running
event loop's callbacks (use ``AsyncClient`` there).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
import time
from datetime import datetime
from typing import Any, AsyncGenerator, AsyncIterator, Coroutine, Iterator, Sequence, TypeVar, Unpack, overload

from .client import AsyncClient, Cursor, PagingDirection
from .filters import CSV, PostFilter, PostFilterArgs
from .meta import ResponseMeta
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
from .ordering import StreamPost
from .resume import ResumedPost, ResumeOptions, ResumePoint, ResumeStats, ResumingStream
from .retry import RetryPolicy
from .stream import PostStream, StreamOptions, StreamStats
from .webhook_calls import WebhookEndpointChanges, replay_body
from .webhook_models import (
    WebhookAttemptList,
    WebhookEndpoint,
    WebhookEndpointList,
    WebhookEndpointSecret,
    WebhookTestQueued,
)

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="tickerwire-client-loop", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        if hasattr(signal, "pthread_sigmask"):  # Ctrl-C and SIGTERM go to the application's thread
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if not self.thread.is_alive():
            coro.close()
            raise RuntimeError("the client is closed")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                # Short waits, so a signal (KeyboardInterrupt) is handled promptly on every platform.
                step = 0.25 if deadline is None else max(min(0.25, deadline - time.monotonic()), 0.0)
                try:
                    return future.result(step)
                except concurrent.futures.TimeoutError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
                    if not self.thread.is_alive():
                        raise RuntimeError("the client was closed during the call") from None
        except BaseException:
            future.cancel()
            raise

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> T:
            return await anext(agen)

        try:
            while True:
                try:
                    yield self.run(step())
                except StopAsyncIteration:
                    return
        finally:
            if isinstance(agen, AsyncGenerator):
                self.run(agen.aclose())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class Client:
    """Same constructor, methods and results as :class:`AsyncClient`, blocking.

    Every result carries its own response ``meta`` (as with ``AsyncClient``); an error carries
    its own in ``exc.meta``.
    """

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        stream_url: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 15.0,
    ) -> None:
        self._thread = _LoopThread()

        async def make() -> AsyncClient:  # its session belongs to the private loop
            return AsyncClient(base_url, key, stream_url=stream_url, retry=retry, timeout=timeout)

        self._async = self._thread.run(make())

    @property
    def retries(self) -> int:
        """Retries made so far (429/503 or connection errors), for observability."""
        return self._async.retries

    def posts(
        self,
        where: PostFilter | None = None,
        *,
        lang: str | None = None,
        after: Cursor = None,
        before: Cursor = None,
        limit: int | None = None,
        **filters: Unpack[PostFilterArgs],
    ) -> Page:
        """GET /posts (see :meth:`AsyncClient.posts`)."""
        return self._thread.run(self._async.posts(where, lang=lang, after=after, before=before, limit=limit, **filters))

    def post(self, id_or_slug: int | str, *, lang: str | None = None) -> PostDetail:
        """GET /posts/{id_or_slug}."""
        return self._thread.run(self._async.post(id_or_slug, lang=lang))

    def categories(self, *, lang: str | None = None) -> CategoryTree:
        """GET /categories."""
        return self._thread.run(self._async.categories(lang=lang))

    def category(self, slug: str, *, lang: str | None = None) -> Category:
        """GET /categories/{slug}."""
        return self._thread.run(self._async.category(slug, lang=lang))

    def tokens(self) -> TokenList:
        """GET /tokens."""
        return self._thread.run(self._async.tokens())

    def token(self, ticker: str) -> TokenDetail:
        """GET /tokens/{ticker}."""
        return self._thread.run(self._async.token(ticker))

    def sentiment_pulse(self) -> SentimentPulse:
        """GET /sentiment-pulse."""
        return self._thread.run(self._async.sentiment_pulse())

    def languages(self) -> LanguageList:
        """GET /languages."""
        return self._thread.run(self._async.languages())

    def search(
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
        """GET /search (see :meth:`AsyncClient.search`)."""
        return self._thread.run(
            self._async.search(q, where, lang=lang, after=after, before=before, limit=limit, **filters)
        )

    def changes(
        self,
        cursor: str | None = None,
        *,
        lang: CSV = None,
        tickers: CSV = None,
        categories: CSV = None,
        limit: int | None = None,
    ) -> ChangesPage:
        """GET /changes (see :meth:`AsyncClient.changes`)."""
        return self._thread.run(
            self._async.changes(cursor, lang=lang, tickers=tickers, categories=categories, limit=limit)
        )

    def iter_changes(
        self,
        cursor: str | None = None,
        *,
        lang: CSV = None,
        tickers: CSV = None,
        categories: CSV = None,
        limit: int | None = 50,
    ) -> Iterator[ChangesPage]:
        """Every page of GET /changes from ``cursor`` (see :meth:`AsyncClient.iter_changes`)."""
        return self._thread.iterate(
            self._async.iter_changes(cursor, lang=lang, tickers=tickers, categories=categories, limit=limit)
        )

    def webhook_endpoints(self) -> WebhookEndpointList:
        """GET /webhooks/endpoints."""
        return self._thread.run(self._async.webhook_endpoints())

    def webhook_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        """GET /webhooks/endpoints/{id}."""
        return self._thread.run(self._async.webhook_endpoint(endpoint_id))

    def webhook_attempts(self, endpoint_id: str, *, limit: int | None = None) -> WebhookAttemptList:
        """GET /webhooks/endpoints/{id}/attempts."""
        return self._thread.run(self._async.webhook_attempts(endpoint_id, limit=limit))

    def create_webhook_endpoint(
        self,
        url: str,
        *,
        description: str | None = None,
        locales: Sequence[str] | None = None,
        tickers: Sequence[str] | None = None,
        categories: Sequence[str] | None = None,
        idempotency_key: str | None = None,
    ) -> WebhookEndpointSecret:
        """POST /webhooks/endpoints (see :meth:`AsyncClient.create_webhook_endpoint`)."""
        return self._thread.run(
            self._async.create_webhook_endpoint(
                url,
                description=description,
                locales=locales,
                tickers=tickers,
                categories=categories,
                idempotency_key=idempotency_key,
            )
        )

    def update_webhook_endpoint(self, endpoint_id: str, **changes: Unpack[WebhookEndpointChanges]) -> WebhookEndpoint:
        """PATCH /webhooks/endpoints/{id}: only the fields given change."""
        return self._thread.run(self._async.update_webhook_endpoint(endpoint_id, **changes))

    def delete_webhook_endpoint(self, endpoint_id: str) -> ResponseMeta:
        """DELETE /webhooks/endpoints/{id}."""
        return self._thread.run(self._async.delete_webhook_endpoint(endpoint_id))

    def pause_webhook_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        """POST /webhooks/endpoints/{id}/pause."""
        return self._thread.run(self._async.pause_webhook_endpoint(endpoint_id))

    def resume_webhook_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        """POST /webhooks/endpoints/{id}/resume."""
        return self._thread.run(self._async.resume_webhook_endpoint(endpoint_id))

    def rotate_webhook_secret(self, endpoint_id: str) -> WebhookEndpointSecret:
        """POST /webhooks/endpoints/{id}/rotate-secret: the new secret, shown this once."""
        return self._thread.run(self._async.rotate_webhook_secret(endpoint_id))

    @overload
    def replay_webhook_endpoint(self, endpoint_id: str, *, since: datetime | str) -> WebhookEndpoint: ...

    @overload
    def replay_webhook_endpoint(self, endpoint_id: str, *, cursor: str) -> WebhookEndpoint: ...

    def replay_webhook_endpoint(
        self, endpoint_id: str, *, since: datetime | str | None = None, cursor: str | None = None
    ) -> WebhookEndpoint:
        """POST /webhooks/endpoints/{id}/replay: exactly one of ``since`` or ``cursor``."""
        replay_body(since, cursor)  # ValueError unless exactly one is given
        if since is not None:
            return self._thread.run(self._async.replay_webhook_endpoint(endpoint_id, since=since))
        if cursor is not None:
            return self._thread.run(self._async.replay_webhook_endpoint(endpoint_id, cursor=cursor))
        raise ValueError("replay needs exactly one of since= or cursor=")

    def send_webhook_test(self, endpoint_id: str) -> WebhookTestQueued:
        """POST /webhooks/endpoints/{id}/test: a ``webhook.test`` message is queued."""
        return self._thread.run(self._async.send_webhook_test(endpoint_id))

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
    ) -> Iterator[PostLean]:
        """Every post, page after page (see :meth:`AsyncClient.iter_posts`)."""
        return self._thread.iterate(
            self._async.iter_posts(
                where, direction=direction, lang=lang, after=after, before=before, limit=limit, **filters
            )
        )

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
    ) -> Iterator[PostLean]:
        """Every search result, page after page (see :meth:`AsyncClient.iter_search`)."""
        return self._thread.iterate(
            self._async.iter_search(
                q, where, direction=direction, lang=lang, after=after, before=before, limit=limit, **filters
            )
        )

    def stream(self, **options: Unpack[StreamOptions]) -> SyncPostStream:
        """A blocking :class:`PostStream`: ``with client.stream(...) as s: for item in s: ...``."""
        return SyncPostStream(self._thread, self._thread.run(self._make_stream(options)))

    async def _make_stream(self, options: StreamOptions) -> PostStream:
        return self._async.stream(**options)  # registered, so closing the client closes it

    def resuming_stream(self, **options: Unpack[ResumeOptions]) -> SyncResumingStream:
        """A blocking :class:`ResumingStream`: ``with client.resuming_stream(resume_from=saved) as s:
        for item in s: handle(item); save(item.position.to_json())``."""
        return SyncResumingStream(self._thread, self._thread.run(self._make_resuming(options)))

    async def _make_resuming(self, options: ResumeOptions) -> ResumingStream:
        return self._async.resuming_stream(**options)

    def close(self) -> None:
        self._thread.run(self._async.close())
        self._thread.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _next_item(thread: _LoopThread, stream: AsyncIterator[T]) -> T:
    """The next item of an async stream, for a blocking iterator over it."""
    if not thread.thread.is_alive():
        raise StopIteration  # the client was closed, and its streams with it (as with AsyncClient)

    async def one() -> T:
        return await stream.__anext__()

    try:
        return thread.run(one())
    except StopAsyncIteration:
        raise StopIteration from None


class SyncPostStream:
    def __init__(self, thread: _LoopThread, stream: PostStream) -> None:
        self._thread = thread
        self.stream = stream

    @property
    def stats(self) -> StreamStats:
        return self.stream.stats

    def cursors(self) -> dict[str, int | None]:
        """Per locale, the id to resume after (see :meth:`PostStream.cursors`)."""
        return self.stream.cursors()

    def __enter__(self) -> SyncPostStream:
        self._thread.run(self._start())
        return self

    async def _start(self) -> None:
        self.stream.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[StreamPost]:
        return self

    def __next__(self) -> StreamPost:
        return _next_item(self._thread, self.stream)

    def close(self) -> None:
        self._thread.run(self.stream.close())


class SyncResumingStream:
    def __init__(self, thread: _LoopThread, stream: ResumingStream) -> None:
        self._thread = thread
        self.stream = stream

    @property
    def stats(self) -> ResumeStats:
        return self.stream.stats

    @property
    def position(self) -> ResumePoint:
        """Where to resume: after the last item taken (see :class:`ResumingStream`)."""
        return self.stream.position

    def __enter__(self) -> SyncResumingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[ResumedPost]:
        return self

    def __next__(self) -> ResumedPost:
        return _next_item(self._thread, self.stream)

    def close(self) -> None:
        if self._thread.thread.is_alive():
            self._thread.run(self.stream.close())
