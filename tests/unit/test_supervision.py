"""Supervision, readiness and the log-discontinuity rule: pure logic, no I/O."""

from __future__ import annotations

import asyncio
import random

from aiokafka import TopicPartition

from tickerwire.services.common.logcheck import discontinuity
from tickerwire.services.common.ops import answer_ready
from tickerwire.services.common.readiness import Readiness
from tickerwire.services.common.retry import Backoff
from tickerwire.services.common.supervise import Supervisor

TP = TopicPartition("t.posts.v1", 2)


async def test_a_crashed_task_is_restarted_and_readiness_says_so_meanwhile():
    supervisor = Supervisor(base_s=0.2, cap_s=0.2)
    runs = []
    seen_down = []

    async def task():
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("boom")
        seen_down.append(await supervisor.check())
        await asyncio.sleep(3600)

    running = asyncio.create_task(supervisor.run("catalog", task))
    async def down():
        while not supervisor.down:
            await asyncio.sleep(0.005)
        return await supervisor.check()

    ok, detail = await asyncio.wait_for(down(), 2)
    assert not ok and "catalog crashed (RuntimeError: boom)" in detail
    while len(runs) < 2:
        await asyncio.sleep(0.01)
    assert seen_down == [(True, "ok")]  # up again once restarted
    assert supervisor.restarts == {"catalog": 1} and not supervisor.fatal.is_set()
    running.cancel()


async def test_a_task_that_keeps_crashing_makes_the_process_exit():
    supervisor = Supervisor(base_s=0.001, cap_s=0.001, max_failures=3)

    async def task():
        raise ValueError("always")

    await asyncio.wait_for(supervisor.run("sweeper", task), 2)
    assert supervisor.fatal.is_set()
    assert "sweeper failed 3 times in a row" in supervisor.fatal_reason


async def test_a_returning_task_counts_as_a_crash():
    supervisor = Supervisor(base_s=0.001, cap_s=0.001, max_failures=2)

    async def task():
        return None

    await asyncio.wait_for(supervisor.run("announcer", task), 2)
    assert supervisor.fatal.is_set() and "returned" in supervisor.fatal_reason


async def test_readiness_answers_within_its_budget_when_a_check_hangs():
    ready = Readiness(budget_s=0.3)

    async def hangs():
        await asyncio.sleep(3600)
        return True, "ok"

    async def fine():
        return True, "ok"

    async def broken():
        raise ConnectionError("refused")

    ready.add("postgres", hangs)
    ready.add("catalog", fine)
    ready.add("broker", broken)
    started = asyncio.get_running_loop().time()
    ok, checks = await ready.evaluate()
    assert asyncio.get_running_loop().time() - started < 0.5
    assert not ok
    assert checks["postgres"] == {"ok": False, "detail": "no answer within 0.3s"}
    assert checks["catalog"] == {"ok": True, "detail": "ok"}
    assert checks["broker"]["ok"] is False and "refused" in checks["broker"]["detail"]


async def test_the_readyz_answer_is_bounded_even_for_a_check_that_ignores_budgets():
    async def stuck():
        await asyncio.sleep(3600)

    started = asyncio.get_running_loop().time()
    ok, detail = await answer_ready(stuck)
    assert asyncio.get_running_loop().time() - started < 1.3
    assert not ok and "no answer" in detail


def test_positions_inside_the_log_are_fine():
    assert discontinuity(TP, 0, 0, 0) is None  # empty log, nothing read
    assert discontinuity(TP, 10, 0, 10) is None  # caught up
    assert discontinuity(TP, 5, 5, 10) is None  # retention deleted only what was read


def test_a_position_past_the_log_end_is_a_reset():
    gap = discontinuity(TP, 10529, 0, 20)
    assert gap is not None
    assert "t.posts.v1[2]" in gap.reason and "10529" in gap.reason and "past the log end 20" in gap.reason


def test_a_position_before_the_log_start_lost_records():
    gap = discontinuity(TP, 3, 7, 20)
    assert gap is not None and "before the log start 7" in gap.reason


def test_a_backoff_grows_to_its_cap_and_is_short_again_after_a_reset():
    backoff = Backoff(0.5, 4.0, rng=random.Random(7))
    pauses = [backoff.delay() for _ in range(6)]
    assert all(0 <= p <= min(4.0, 0.5 * 2**n) for n, p in enumerate(pauses))
    assert backoff.ceiling == 4.0  # capped
    backoff.reset()
    assert backoff.ceiling == 0.5 and backoff.delay() <= 0.5
