"""Capped, jittered exponential backoff for transient failures."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Awaitable, Callable, TypeVar

from .errors import TransientError

T = TypeVar("T")
log = logging.getLogger(__name__)

#: A retried operation still failing after this long is said at ERROR (once, then every
#: :data:`ERROR_EVERY_S`): an outage of a dependency is an operator's business, the retries are not.
ERROR_AFTER_S = 10.0
ERROR_EVERY_S = 300.0


class Failing:
    """The last failure of each operation being retried now, by its ``what``: a service passes
    one to its retries and to its readiness, which says why it is still starting."""

    def __init__(self) -> None:
        self._why: dict[str, str] = {}

    def failed(self, what: str, exc: BaseException) -> None:
        self._why[what] = f"{what} failed: {exc}"

    def done(self, what: str) -> None:
        self._why.pop(what, None)

    def causes(self) -> str:
        """Every operation failing now, with its cause, in one line ("" when none is)."""
        return "; ".join(self._why.values())

    def why(self, what: str) -> str | None:
        """The last failure of ``what`` while it is retried; None once it worked (or never failed)."""
        return self._why.get(what)


def backoff_delays(base: float = 0.1, cap: float = 5.0, rng: random.Random | None = None):
    """Infinite "full jitter" delays: uniform(0, min(cap, base * 2**attempt)) (:class:`Backoff`'s rule)."""
    backoff = Backoff(base, cap, rng)
    while True:
        yield backoff.delay()


class Backoff:
    """The pauses of a loop that restarts a long-running step after a failure: capped and
    jittered (the one rule, which :func:`backoff_delays` yields too), and back to ``base`` after
    :meth:`reset`. Call it once the step has worked again, or one bad minute leaves every later
    failure waiting the cap."""

    def __init__(self, base: float, cap: float, rng: random.Random | None = None) -> None:
        self.base, self.cap = base, cap
        self._rng = rng or random.Random()
        self.failures = 0

    @property
    def ceiling(self) -> float:
        """The longest the next pause can be."""
        return min(self.cap, self.base * (2 ** min(self.failures, 30)))

    def delay(self) -> float:
        """The next pause, counting one more failure."""
        pause = self._rng.uniform(0, self.ceiling)
        self.failures += 1
        return pause

    def reset(self) -> None:
        self.failures = 0


async def retry_transient(
    op: Callable[[], Awaitable[T]],
    *,
    what: str,
    base: float = 0.1,
    cap: float = 5.0,
    attempts: int | None = None,
    on_retry: Callable[[BaseException], None] | None = None,
    failing: Failing | None = None,
    within_s: float | None = None,
    quiet: bool = False,
) -> T:
    """Run ``op`` until it succeeds, retrying only :class:`TransientError` with backoff.

    ``attempts=None`` retries forever: the projector prefers waiting to skipping an event.
    ``within_s`` bounds the retrying in time instead: no attempt starts past it, and the last
    failure is raised. ``failing`` holds the last failure while ``op`` is retried (a service's
    readiness reads it). ``quiet`` logs the retries at DEBUG: a command says its one line at
    the end instead.
    """
    delays = backoff_delays(base, cap)
    tried = 0
    started = time.monotonic()
    said_at: float | None = None  # when the ERROR was last written
    try:
        while True:
            try:
                return await op()
            except TransientError as exc:
                tried += 1
                now = time.monotonic()
                if attempts is not None and tried >= attempts:
                    raise
                delay = next(delays)
                if within_s is not None:
                    if now - started >= within_s:
                        raise
                    delay = min(delay, started + within_s - now)
                if failing is not None:
                    failing.failed(what, exc)
                if quiet:
                    log.debug("%s failed (%s); retry %d in %.2fs", what, exc, tried, delay)
                elif now - started >= ERROR_AFTER_S and (said_at is None or now - said_at >= ERROR_EVERY_S):
                    said_at = now
                    log.error("%s still failing after %.0f s (%s); retrying", what, now - started, exc)
                else:
                    log.warning("%s failed (%s); retry %d in %.2fs", what, exc, tried, delay)
                if on_retry is not None:
                    on_retry(exc)
                await asyncio.sleep(delay)
    finally:
        if failing is not None:
            failing.done(what)
