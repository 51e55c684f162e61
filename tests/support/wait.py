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


#: How long the end of a ``background`` block waits for its task to stop.
STOP_WAIT_S = 30.0


@contextlib.asynccontextmanager
async def background(coro: Coroutine) -> AsyncIterator[asyncio.Task]:
    """Run ``coro`` as a task while the block runs; cancel it and wait for it at the end (a task
    that does not stop within ``STOP_WAIT_S`` fails the test; asyncio.wait never waits past it)."""
    task = asyncio.create_task(coro)
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.wait([task], timeout=STOP_WAIT_S)
        if not task.done():
            raise AssertionError(
                f"the background task did not stop within {STOP_WAIT_S:g} s of its cancellation: {task!r}"
            )
        with contextlib.suppress(asyncio.CancelledError):
            await task
