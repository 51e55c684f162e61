"""Polling for a condition, with a deadline."""

from __future__ import annotations

import asyncio
import time
from typing import Callable


async def until(condition: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> None:
    """Return once ``condition()`` holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        await asyncio.sleep(every)
