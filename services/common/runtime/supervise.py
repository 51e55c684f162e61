"""Supervision of a process's background tasks: none of them dies silently.

Every background task of a service runs under its application's :class:`Supervisor`. A task
that crashes (or returns: background tasks are meant to run forever) is logged at ERROR and
restarted after a capped, jittered pause; while it is down, the supervisor's readiness
check says so. A task that keeps crashing (``max_failures`` times in a row, each within
``healthy_after_s`` of its start) has died for good: the supervisor sets :attr:`fatal`, and
the process exits non-zero so that its own supervisor (systemd, a container runtime,
``tickerwire up``) restarts it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import AsyncIterator, Awaitable, Callable

from aiohttp import web

from .retry import backoff_delays

log = logging.getLogger(__name__)

#: How long an application's shutdown waits for one background task to end once cancelled.
STOP_TIMEOUT_S = 15.0


def honour_cancellation() -> None:
    """Raise ``CancelledError`` if the current task was asked to stop, even if the request was
    swallowed on its way. aiokafka's ``close()``/``stop()`` await their own tasks inside
    ``contextlib.suppress(CancelledError)``: a stop requested while a loop restarts its consumer
    is eaten there, and a ``while True`` loop would go on for ever, its shutdown waiting on it.
    Every loop around such a library calls this at the top of each turn."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def stray(exc: asyncio.CancelledError) -> bool:
    """True when ``exc`` reached the current task although nobody asked it to stop: a library
    cancelled one of its own tasks and the ``CancelledError`` leaked into ours (aiokafka's
    consumer does, after a broker outage of some seconds). Treated as a crash, never as a stop:
    a supervised task that took it for a stop ended for good, unlogged, while readiness said
    its tasks were fine."""
    task = asyncio.current_task()
    return task is not None and not task.cancelling()


class Supervisor:
    def __init__(
        self, *, base_s: float = 0.5, cap_s: float = 10.0, max_failures: int = 8, healthy_after_s: float = 60.0
    ) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.max_failures = max_failures
        self.healthy_after_s = healthy_after_s
        #: name -> why the task is down right now (absent while it runs).
        self.down: dict[str, str] = {}
        self.restarts: dict[str, int] = {}
        self.fatal = asyncio.Event()
        self.fatal_reason = ""

    async def run(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        """Run ``factory()`` until cancelled, restarting it when it fails."""
        failures = 0
        delays = backoff_delays(self.base_s, self.cap_s)
        while True:
            started = time.monotonic()
            self.down.pop(name, None)
            try:
                await factory()
                reason = "returned"
                exc: BaseException | None = None
            except asyncio.CancelledError as err:
                if not stray(err):
                    raise
                reason, exc = "CancelledError without a stop being asked (a library's own cancellation leaked out)", err
            except Exception as err:
                reason, exc = f"{type(err).__name__}: {err}", err
            honour_cancellation()  # stopping, whatever the task said on its way out: no restart
            if time.monotonic() - started >= self.healthy_after_s:
                failures, delays = 0, backoff_delays(self.base_s, self.cap_s)
            failures += 1
            self.down[name] = f"crashed ({reason})"
            self.restarts[name] = self.restarts.get(name, 0) + 1
            if failures >= self.max_failures:
                self.fatal_reason = f"background task {name} failed {failures} times in a row, last: {reason}"
                log.error("%s; stopping the process", self.fatal_reason, exc_info=exc)
                self.fatal.set()
                return
            delay = next(delays)
            log.error(
                "background task %s crashed (%s); restart %d in %.2fs", name, reason, failures, delay, exc_info=exc
            )
            await asyncio.sleep(delay)

    def task(self, name: str, factory: Callable[[web.Application], Awaitable[None]]):
        """A ``cleanup_ctx`` entry running ``factory(app)`` supervised for the app's lifetime."""

        async def ctx(app: web.Application) -> AsyncIterator[None]:
            task = asyncio.create_task(self.run(name, lambda: factory(app)), name=name)
            yield
            task.cancel()
            # Bounded: asyncio.wait never cancels again nor waits past its timeout (wait_for does both).
            await asyncio.wait([task], timeout=STOP_TIMEOUT_S)
            if not task.done():
                log.error(
                    "background task %s did not stop within %.0f s of its cancellation; leaving it behind",
                    name,
                    STOP_TIMEOUT_S,
                )
            elif not task.cancelled() and task.exception() is not None:
                log.error("background task %s failed while stopping", name, exc_info=task.exception())

        return ctx

    async def check(self) -> tuple[bool, str]:
        """Readiness: every supervised task is running."""
        if not self.down:
            return True, "ok"
        return False, "; ".join(f"{name} {why}" for name, why in sorted(self.down.items()))


SUPERVISOR = web.AppKey("supervisor", Supervisor)


def supervisor_of(app: web.Application) -> Supervisor:
    """The application's supervisor, created on first use (``run_app`` exits when it gives up)."""
    if SUPERVISOR not in app:
        app[SUPERVISOR] = Supervisor()
    return app[SUPERVISOR]
