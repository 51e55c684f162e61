"""A background loop stops when cancelled: no wait in one may lose a cancellation.

On Python 3.11, ``asyncio.wait_for`` returns the awaited result when a cancellation arrives
just as that result does, and the cancellation is lost: a loop built on it may never stop.
Long-lived loops wait with ``asyncio.timeout`` instead; the few one-shot waits left are listed.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from tickerwire.services.common.kafka.logcheck import LogProbe, find_discontinuities

ROOT = Path(__file__).parents[2]

#: wait_for calls allowed to stay, per file: one-shot waits that end by themselves whatever
#: happens to a cancellation (none sits in a loop that runs for the process's lifetime).
ONE_SHOT_WAIT_FOR = {
    "services/projector/accept.py": 2,  # the accept-log command reads the log offsets once
    "services/common/operator/admin_listener.py": 1,  # one /readyz answer
    "services/api/publisher.py": 2,  # the producer's start, and one change's acknowledgement
}


def wait_for_calls(source: str) -> int:
    """Calls of ``wait_for`` (``asyncio.wait_for(...)`` or a bare ``wait_for(...)``) in ``source``;
    the name in a comment or a docstring does not count."""
    return sum(
        1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) == "wait_for" or getattr(node.func, "id", None) == "wait_for")
    )


def test_only_the_listed_one_shot_waits_use_wait_for():
    found = {}
    for folder in ("services", "devstack"):
        for path in (ROOT / folder).rglob("*.py"):
            if n := wait_for_calls(path.read_text()):
                found[str(path.relative_to(ROOT))] = n
    assert found == ONE_SHOT_WAIT_FOR


def test_the_count_is_of_calls_not_of_text():
    assert wait_for_calls("import asyncio\nasync def f(x):\n    return await asyncio.wait_for(x, 1)\n") == 1
    assert wait_for_calls('"""asyncio.wait_for(x) loses a cancellation"""\n# never wait_for(...)\nx = 1\n') == 0


class AnswersAsCancelled:
    """A consumer whose offsets answer arrives together with a cancellation of its caller."""

    def __init__(self) -> None:
        self.caller: asyncio.Task | None = None
        self.asked = 0

    async def _answer(self, tps):
        self.asked += 1
        asyncio.get_running_loop().call_soon(self.caller.cancel)
        await asyncio.sleep(0)
        return {tp: 0 for tp in tps}

    beginning_offsets = end_offsets = _answer


async def test_a_log_check_cancelled_as_the_broker_answers_stops():
    consumer = AnswersAsCancelled()
    task = consumer.caller = asyncio.ensure_future(
        find_discontinuities(consumer, LogProbe(None, "unused"), {TopicPartition("t", 0): 0})
    )
    with pytest.raises(asyncio.CancelledError):
        await task
    assert consumer.asked == 1  # stopped at the first answer, not after asking again
