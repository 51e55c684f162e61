"""Supervision, readiness and the log-discontinuity rule: pure logic, no I/O."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import statistics

import pytest
from aiokafka import TopicPartition

from tickerwire.services.common.kafka.logcheck import discontinuity
from tickerwire.services.common.operator.admin_listener import answer_ready
from tickerwire.services.common.operator.readiness import Readiness
from tickerwire.services.common.runtime import retry, supervise
from tickerwire.services.common.runtime.errors import StorageUnavailable
from tickerwire.services.common.runtime.retry import Backoff, retry_transient
from tickerwire.services.common.runtime.supervise import Supervisor, honour_cancellation

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
        # The restart's pause is jittered, uniform(0, 0.2 s): a poll every few ms can miss all
        # of it (it did, once in a CI run). Yielding to the loop alone checks at every turn, and
        # the supervisor's pause, however short, lasts at least one.
        while not supervisor.down:
            await asyncio.sleep(0)
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


async def test_a_cancellation_leaking_out_of_a_library_is_a_crash_not_a_stop(caplog):
    # aiokafka after a broker outage: one of its own tasks is cancelled and the CancelledError
    # reaches the caller, which nobody asked to stop. The supervised task used to end there for
    # good, unlogged, with readiness still "ok".
    supervisor = Supervisor(base_s=0.01, cap_s=0.01)
    runs = []

    async def task():
        runs.append(1)
        if len(runs) == 1:
            inner = asyncio.ensure_future(asyncio.sleep(3600))
            asyncio.get_running_loop().call_soon(inner.cancel)
            await inner  # raises CancelledError into this task
        await asyncio.sleep(3600)

    with caplog.at_level(logging.ERROR):
        running = asyncio.create_task(supervisor.run("consume", task))
        while len(runs) < 2:
            await asyncio.sleep(0.005)
    assert supervisor.restarts == {"consume": 1} and not running.done()
    assert any("consume crashed (CancelledError without a stop" in r.getMessage() for r in caplog.records)
    running.cancel()  # a real stop still ends it
    with pytest.raises(asyncio.CancelledError):
        await running


async def close_like_aiokafka() -> None:
    """What aiokafka's close()/stop() do: await one of its own tasks with CancelledError
    suppressed, so a cancellation of the caller arriving meanwhile is swallowed."""
    own = asyncio.ensure_future(asyncio.sleep(0.2))
    with contextlib.suppress(asyncio.CancelledError):
        await own


async def test_a_loop_stops_when_its_cancellation_was_swallowed_by_a_library():
    turns = []
    inside = asyncio.Event()

    async def consume_forever() -> None:
        while True:
            honour_cancellation()
            turns.append(1)
            inside.set()
            await close_like_aiokafka()  # stopping the last consumer, as a restart does

    task = asyncio.create_task(consume_forever())
    await asyncio.wait_for(inside.wait(), 1)
    task.cancel()  # lands inside the library's close, which swallows it
    done, _ = await asyncio.wait([task], timeout=2)
    assert task in done and task.cancelled()
    assert len(turns) == 1  # no new turn after the stop was asked for


async def test_a_task_that_swallows_its_cancellation_is_not_restarted():
    supervisor = Supervisor(base_s=0.001, cap_s=0.001)
    runs = []
    inside = asyncio.Event()

    async def task() -> None:
        runs.append(1)
        inside.set()
        await close_like_aiokafka()
        raise ConnectionError("the consumer failed while stopping")

    running = asyncio.create_task(supervisor.run("consume", task))
    await asyncio.wait_for(inside.wait(), 1)
    running.cancel()
    done, _ = await asyncio.wait([running], timeout=2)
    assert running in done and running.cancelled()
    assert runs == [1] and supervisor.restarts == {}


async def test_an_apps_shutdown_waits_for_a_task_that_will_not_stop_only_so_long(monkeypatch, caplog):
    monkeypatch.setattr(supervise, "STOP_TIMEOUT_S", 0.2)
    supervisor = Supervisor()
    released = asyncio.Event()
    running = asyncio.Event()

    async def stubborn(app) -> None:
        running.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if released.is_set():
                    raise

    ctx = supervisor.task("stubborn", stubborn)(None)
    await ctx.__anext__()  # the task is created
    # ... and must run before it is cancelled: a task cancelled before its first step ends at
    # once, and the shutdown would have nothing to wait for. (Up to Python 3.11 the wait_for
    # below wrapped the shutdown in a task of its own, which gave this one its first step.)
    await asyncio.wait_for(running.wait(), 2)
    try:
        with caplog.at_level(logging.ERROR):
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(ctx.__anext__(), 2)  # the shutdown half of the cleanup context
        assert "background task stubborn did not stop within 0 s of its cancellation" in caplog.text
    finally:
        released.set()  # this test's own clean-up, passed or failed: the task left behind stops now
        left = [t for t in asyncio.all_tasks() if t.get_name() == "stubborn"]
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=2)
    assert len(left) == 1 and left[0].done()


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
    """Full jitter: the n-th pause is uniform over [0, min(cap, base * 2^n)]. Bounded from above
    and below in the mean over many runs, so a backoff that stays at 0 (or at base, or skips the
    cap) fails, while a single short pause (jitter) is allowed."""
    rng = random.Random(7)
    backoffs = [Backoff(0.5, 4.0, rng=rng) for _ in range(400)]
    ceilings = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]  # doubling from base, then capped

    def pauses() -> list[list[float]]:
        """Per failure, the pause of every backoff."""
        return [[b.delay() for b in backoffs] for _ in ceilings]

    grown = pauses()
    for ceiling, column in zip(ceilings, grown):
        assert all(0 <= p <= ceiling for p in column), ceiling
        assert 0.45 * ceiling <= statistics.fmean(column) <= 0.55 * ceiling, ceiling
        assert max(column) >= 0.95 * ceiling and min(column) <= 0.05 * ceiling, ceiling  # spread over the range
    assert all(b.ceiling == 4.0 for b in backoffs)  # capped
    for b in backoffs:
        b.reset()
    again = pauses()
    assert 0.45 * 0.5 <= statistics.fmean(again[0]) <= 0.55 * 0.5 and max(again[0]) <= 0.5  # short again
    assert statistics.fmean(again[3]) >= 0.45 * 4.0  # and grows again


async def test_an_operation_still_failing_after_a_while_is_said_at_error_once_and_its_cause_is_kept(
    monkeypatch, caplog
):
    # A database down for minutes gave only WARNING lines ("retry N"), and readiness said
    # "starting" without the reason.
    monkeypatch.setattr(retry, "ERROR_AFTER_S", 0.05)
    calls = []
    seen = []
    failing = retry.Failing()

    async def op():
        calls.append(1)
        seen.append(failing.why("connect to PostgreSQL"))
        if len(calls) < 30:
            raise StorageUnavailable("ConnectionRefusedError: [Errno 111] Connection refused")
        return "pool"

    with caplog.at_level(logging.WARNING):
        assert await retry_transient(op, what="connect to PostgreSQL", base=0.01, cap=0.02, failing=failing) == "pool"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert (
        len(errors) == 1
        and "connect to PostgreSQL still failing after" in errors[0]
        and "Connection refused" in errors[0]
    )
    assert seen[0] is None and "Connection refused" in seen[-1]  # the cause, while it is retried
    assert failing.why("connect to PostgreSQL") is None  # forgotten once it worked


async def test_readiness_says_why_a_service_is_still_starting_from_the_failures_it_is_given():
    """The facts come in as an argument (the service's Failing), not from a module global: two
    services in one process each say their own cause."""
    from tickerwire.services.cli.settings import FullConfig
    from tickerwire.services.common.db import CONNECT_POSTGRES
    from tickerwire.services.common.operator.readiness import service_readiness

    config = FullConfig.from_env(
        {"TICKERWIRE_DATABASE_URL": "postgresql://x/y", "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": "k:9092"}
    )
    refused, quiet = retry.Failing(), retry.Failing()
    refused.failed(CONNECT_POSTGRES, StorageUnavailable("Connection refused"))
    one = service_readiness(config, lambda: None, Supervisor(), broker=False, failing=refused)
    other = service_readiness(config, lambda: None, Supervisor(), broker=False, failing=quiet)
    assert (await one())[1]["postgres"] == {
        "ok": False,
        "detail": "starting (connect to PostgreSQL failed: Connection refused)",
    }
    assert (await other())[1]["postgres"] == {"ok": False, "detail": "starting"}
