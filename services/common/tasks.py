"""Background tasks owned by an aiohttp application's ``cleanup_ctx``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator, Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)


def background_task(name: str, factory: Callable[[web.Application], Awaitable[None]]):
    """A cleanup_ctx entry that runs ``factory(app)`` for the app's lifetime and cancels it at shutdown.

    A crash is logged loudly; it does not bring the process down silently.
    """

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(factory(app), name=name)

        def crashed(t: asyncio.Task) -> None:
            if not t.cancelled() and t.exception() is not None:
                log.error("background task %s crashed", name, exc_info=t.exception())

        task.add_done_callback(crashed)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx
