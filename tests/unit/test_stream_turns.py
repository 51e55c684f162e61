"""The stream's per-workspace turns for slot grants: one holder per workspace, the others queued
in memory for a bounded time, other workspaces never behind them, no entry left behind."""

from __future__ import annotations

import asyncio

import pytest

from tickerwire.services.common.errors import StorageUnavailable
from tickerwire.services.stream.leases import Turns


async def test_one_holder_per_workspace_and_other_workspaces_never_wait():
    turns, order = Turns(), []
    release = asyncio.Event()

    async def hold(key: str, name: str) -> None:
        async with turns.turn(key, None):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(hold("ws_a", "a1"))
    second = asyncio.create_task(hold("ws_a", "a2"))
    other = asyncio.create_task(hold("ws_b", "b1"))
    await asyncio.sleep(0.05)
    assert order == ["a1", "b1"] and turns.waiting("ws_a") == 2
    release.set()
    await asyncio.gather(first, second, other)
    assert order == ["a1", "b1", "a2"]
    assert turns.waiting("ws_a") == turns.waiting("ws_b") == 0


async def test_a_turn_that_does_not_come_within_the_bound_is_a_503_and_leaves_nothing():
    turns = Turns()
    async with turns.turn("ws_a", None):
        with pytest.raises(StorageUnavailable, match=r"did not come within 0.05 s \(2 of its handshakes"):
            async with turns.turn("ws_a", 0.05):
                pass
        assert turns.waiting("ws_a") == 1
    assert turns.waiting("ws_a") == 0
