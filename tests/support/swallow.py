"""aiokafka's consumer, wrapped to fail one fetch and then to stop slowly while swallowing a
cancellation of its caller, in aiokafka's own pattern (its ``stop()`` awaits its own tasks
inside ``suppress(CancelledError)``): the state in which a consume loop asked to stop could go
on for ever unless it checks for its own cancellation (``honour_cancellation``)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError


def fail_once_then_stop_swallowing(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Patch every consumer: the first fetch fails (the loop restarts its consumer), and that
    consumer's stop swallows a cancellation for a second. The event is set once that stop has
    begun: a cancellation sent then lands inside it."""
    stopping = asyncio.Event()
    failed: list[AIOKafkaConsumer] = []
    getmany, stop = AIOKafkaConsumer.getmany, AIOKafkaConsumer.stop

    async def fails_once(self, *args, **kwargs):
        if not failed:
            failed.append(self)
            raise KafkaConnectionError("injected: the broker went away")
        return await getmany(self, *args, **kwargs)

    async def stops_slowly(self):
        if self in failed:  # the loop's consumer, stopped for the restart
            own = asyncio.ensure_future(asyncio.sleep(1.0))  # aiokafka's own pattern: its task awaited,
            stopping.set()
            with contextlib.suppress(asyncio.CancelledError):  # a cancellation of the caller swallowed
                await own
        await stop(self)

    monkeypatch.setattr(AIOKafkaConsumer, "getmany", fails_once)
    monkeypatch.setattr(AIOKafkaConsumer, "stop", stops_slowly)
    return stopping
