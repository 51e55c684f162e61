"""Readiness: named checks a service registers, evaluated together within one time budget.

``/readyz`` must answer fast and tell the truth: every check runs concurrently, and a check
that has not answered when the budget (1 s) is spent counts as failed ("no answer"), so a
frozen database makes the process report not ready instead of hanging the probe. Where the
answer is served (which port, which route) is the operator endpoints' business, not this
module's.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from aiohttp import web

from ..runtime.retry import Failing

Check = Callable[[], Awaitable[tuple[bool, str]]]

BUDGET_S = 1.0


class Readiness:
    def __init__(self, budget_s: float = BUDGET_S) -> None:
        self.budget_s = budget_s
        self.checks: dict[str, Check] = {}

    def add(self, name: str, check: Check) -> None:
        self.checks[name] = check

    async def evaluate(self) -> tuple[bool, dict[str, dict]]:
        """(ready, {check name: {"ok", "detail"}}); ready only if every check passed within the budget."""
        tasks = {name: asyncio.ensure_future(check()) for name, check in self.checks.items()}
        if tasks:
            await asyncio.wait(tasks.values(), timeout=self.budget_s * 0.9)
        ok, details = True, {}
        for name, task in tasks.items():
            if not task.done():
                task.cancel()
                passed, detail = False, f"no answer within {self.budget_s:g}s"
            elif task.exception() is not None:
                exc = task.exception()
                passed, detail = False, f"{type(exc).__name__}: {exc}"
            else:
                passed, detail = task.result()
            ok = ok and passed
            details[name] = {"ok": passed, "detail": detail}
        return ok, details

    async def __call__(self) -> tuple[bool, dict[str, dict]]:
        return await self.evaluate()


def service_readiness(
    config, pool: Callable[[], "object | None"], supervisor, *, broker: bool, failing: Failing
) -> Readiness:
    """The checks every service shares: PostgreSQL answers and the read model is migrated
    (``pool()`` is None while starting, and ``failing`` says why when its connection failed),
    the broker answers (``broker``), no supervised task is down. The service adds its own."""
    from ..db import CONNECT_POSTGRES, postgres_check
    from ..kafka import broker_check

    ready = Readiness()

    async def postgres() -> tuple[bool, str]:
        p = pool()
        if p is None:  # the pool is being created: say why it is not there yet, when it failed
            why = failing.why(CONNECT_POSTGRES)
            return False, f"starting ({why})" if why else "starting"
        return await postgres_check(p, config.read_model_schema)

    async def reachable_broker() -> tuple[bool, str]:
        return await broker_check(config)

    ready.add("postgres", postgres)
    if broker:
        ready.add("broker", reachable_broker)
    ready.add("tasks", supervisor.check)
    return ready


FAILING = web.AppKey("failing", Failing)


def failing_of(app: web.Application) -> Failing:
    """The application's record of the operations it is retrying, created on first use: its
    retries write it, its readiness reads it."""
    if FAILING not in app:
        app[FAILING] = Failing()
    return app[FAILING]
