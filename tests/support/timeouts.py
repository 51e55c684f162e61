"""The per-test bound (pytest-timeout, ``timeout`` in pyproject.toml) with the one thing its
signal method cannot show: where each asyncio task waits. A hung async test sits in the event
loop's ``select``, whose stack alone says nothing; the tasks' stacks name the await."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading

import pytest

_ARMED = pytest.StashKey[bool]()


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
            task.print_stack(file=sys.stdout)
        pytest.fail(f"Timeout (>{seconds:.0f}s) from pytest-timeout")

    item.stash[_ARMED] = True
    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return True


def disarm(item: pytest.Item) -> bool:
    if not item.stash.get(_ARMED, False):
        return False
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    del item.stash[_ARMED]
    return True
