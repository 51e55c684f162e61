"""``Client``: the synchronous face of :class:`AsyncClient`.

It runs an ``AsyncClient`` on a private event loop in a daemon thread and waits for each
call, so sync and async behave identically (same retries, models, errors and stream rules)
with no second HTTP library. Safe to use from several threads; not from inside a running
event loop's callbacks (use ``AsyncClient`` there).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import signal
import threading
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, TypeVar

from .client import AsyncClient
from .ordering import StreamPost
from .stream import PostStream

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

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        if not self.thread.is_alive():
            if hasattr(coro, "close"):
                coro.close()
            raise RuntimeError("the client is closed")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
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
        try:
            while True:
                try:
                    yield self.run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            if hasattr(agen, "aclose"):
                self.run(agen.aclose())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


def _blocking(name: str) -> Callable[..., Any]:
    method = getattr(AsyncClient, name)

    @functools.wraps(method)
    def call(self: Client, *args: Any, **kwargs: Any) -> Any:
        return self._thread.run(getattr(self._async, name)(*args, **kwargs))

    return call


def _iterating(name: str) -> Callable[..., Any]:
    method = getattr(AsyncClient, name)

    @functools.wraps(method)
    def call(self: Client, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return self._thread.iterate(getattr(self._async, name)(*args, **kwargs))

    return call


class Client:
    """Same constructor, methods and results as :class:`AsyncClient`, blocking."""

    def __init__(self, base_url: str, key: str, **options: Any) -> None:
        self._thread = _LoopThread()

        async def make() -> AsyncClient:
            return AsyncClient(base_url, key, **options)

        self._async = self._thread.run(make())

    posts = _blocking("posts")
    post = _blocking("post")
    categories = _blocking("categories")
    category = _blocking("category")
    tokens = _blocking("tokens")
    token = _blocking("token")
    sentiment_pulse = _blocking("sentiment_pulse")
    languages = _blocking("languages")
    search = _blocking("search")
    iter_posts = _iterating("iter_posts")
    iter_search = _iterating("iter_search")

    @property
    def last_meta(self):
        return self._async.last_meta

    def stream(self, **options: Any) -> SyncPostStream:
        """A blocking :class:`PostStream`: ``with client.stream(...) as s: for item in s: ...``."""
        return SyncPostStream(self._thread, self._thread.run(self._make_stream(options)))

    async def _make_stream(self, options: dict[str, Any]) -> PostStream:
        return self._async.stream(**options)  # registered, so closing the client closes it

    def close(self) -> None:
        self._thread.run(self._async.close())
        self._thread.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncPostStream:
    def __init__(self, thread: _LoopThread, stream: PostStream) -> None:
        self._thread = thread
        self.stream = stream

    @property
    def stats(self):
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
        if not self._thread.thread.is_alive():
            raise StopIteration  # the client was closed, and its streams with it (as with AsyncClient)
        try:
            return self._thread.run(self.stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        self._thread.run(self.stream.close())
