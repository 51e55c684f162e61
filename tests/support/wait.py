"""Polling for a condition, with a deadline; a coroutine run in the background of a block."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator, Callable, Coroutine


async def until(condition: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> None:
    """Return once ``condition()`` holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def background(coro: Coroutine) -> AsyncIterator[asyncio.Task]:
    """Run ``coro`` as a task while the block runs; cancel it and wait for it at the end."""
    task = asyncio.create_task(coro)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
