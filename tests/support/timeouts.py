"""The per-test bound (pytest-timeout, ``timeout`` in pyproject.toml) with what its signal
method cannot do alone.

- It shows where each asyncio task waits: a hung async test sits in the event loop's
  ``select``, whose stack alone says nothing; the tasks' stacks name the await.
- It has a last resort: the signal fails the test by raising in the main thread, and a test
  whose clean-up then hangs too (a task that ignores its cancellation, ``asyncio.run``
  waiting for a blocked thread) would still hold the run. A minute later, a timer thread
  dumps every thread's stack to stderr and ends the process; xdist reports the test as
  failed ("worker crashed") and starts a new worker."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading

import pytest

#: How long after the signal the last resort ends the process.
LAST_RESORT_AFTER_S = 60.0

_TIMER = pytest.StashKey[threading.Timer]()


def arm(item: pytest.Item, seconds: float) -> bool:
    """Fail ``item`` after ``seconds``, printing every asyncio task's stack first (captured, so
    it appears in the failure report). False where a signal cannot be used (not the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return False

    def expired(signum, frame) -> None:
        __tracebackhide__ = True
        try:
            tasks = asyncio.all_tasks(asyncio.get_running_loop())  # the loop the signal interrupted
        except RuntimeError:  # none: a synchronous test
            tasks = set()
        print(f"Timeout after {seconds:.0f} s; {len(tasks)} asyncio task(s) pending:", file=sys.stdout)
        for task in tasks:
            print(f"{task!r}:", file=sys.stdout)
            for line in awaiting(task.get_coro()):
                print(f"  {line}", file=sys.stdout)
        pytest.fail(f"Timeout (>{seconds:.0f}s) from pytest-timeout")

    def last_resort() -> None:
        print(
            f"\n{item.nodeid}: still running {LAST_RESORT_AFTER_S:.0f} s after its timeout; every thread's stack:",
            file=sys.__stderr__,
            flush=True,
        )
        faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
        os._exit(1)

    timer = threading.Timer(seconds + LAST_RESORT_AFTER_S, last_resort)
    timer.daemon = True
    timer.start()
    item.stash[_TIMER] = timer
    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return True


def awaiting(coro) -> list[str]:
    """Where a coroutine waits, through every coroutine it awaits (``Task.print_stack`` shows
    only the outermost frame of a coroutine)."""
    lines: list[str] = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            lines.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        inner = (
            getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
        )
        if (
            inner is not None
            and not hasattr(inner, "cr_frame")
            and not hasattr(inner, "gi_frame")
            and not hasattr(inner, "ag_frame")
        ):
            lines.append(f"awaits {inner!r}"[:300])
            break
        coro = inner
    return lines


def disarm(item: pytest.Item) -> bool:
    timer = item.stash.get(_TIMER, None)
    if timer is None:
        return False
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    timer.cancel()
    del item.stash[_TIMER]
    return True
