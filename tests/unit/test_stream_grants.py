"""The stream's grouped slot grants: one statement in flight per workspace, the handshakes
queued behind it settled together by the next, other workspaces never behind them, a bounded
wait before a statement starts, and nothing left behind (pure logic: the statement is a stub)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from tickerwire.services.common.runtime.errors import StorageUnavailable
from tickerwire.services.stream.leases import Grants


class Statements:
    """A stand-in for the grant statement: records each group, grants while the workspace's
    ``free`` slots last, and runs until ``release`` is set."""

    def __init__(self, free: int = 1000) -> None:
        self.free: dict[str, int] = defaultdict(lambda: free)
        self.groups: list[tuple[str, list[str]]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.undone: list[str] = []
        self.fail: Exception | None = None

    async def settle(self, workspace_id: str, asks: list[tuple[str, int]]) -> list[bool]:
        self.groups.append((workspace_id, [s for s, _ in asks]))
        await self.release.wait()
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc
        out = []
        for _ in asks:
            out.append(self.free[workspace_id] > 0)
            self.free[workspace_id] = max(0, self.free[workspace_id] - 1)
        return out

    async def undo(self, session_ids: list[str]) -> None:
        self.undone.extend(session_ids)


async def test_handshakes_queued_behind_a_statement_are_settled_together_and_other_workspaces_never_wait():
    stmts = Statements(free=3)
    grants = Grants(stmts.settle, stmts.undo)
    stmts.release.clear()
    first = asyncio.create_task(grants.grant("ws_a", ("s1", 3), None))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(grants.grant("ws_a", (f"s{i}", 3), None)) for i in range(2, 6)]
    other = asyncio.create_task(grants.grant("ws_b", ("b1", 3), None))
    await asyncio.sleep(0.01)
    assert stmts.groups == [("ws_a", ["s1"]), ("ws_b", ["b1"])]  # ws_b did not wait for ws_a
    assert grants.pending("ws_a") == 4
    stmts.release.set()
    assert await first is True and await other is True
    assert [await q for q in queued] == [True, True, False, False]  # in order: what the limit leaves
    assert stmts.groups[2] == ("ws_a", ["s2", "s3", "s4", "s5"])  # one statement for the four
    assert len(stmts.groups) == 3
    assert grants.pending("ws_a") == 0 and grants.active() == 0


async def test_a_handshake_whose_statement_does_not_start_within_the_bound_is_a_503_and_is_never_settled():
    stmts = Statements()
    grants = Grants(stmts.settle, stmts.undo)
    stmts.release.clear()
    holder = asyncio.create_task(grants.grant("ws_a", ("s1", 5), None))
    await asyncio.sleep(0.01)  # s1's statement started
    with pytest.raises(StorageUnavailable, match=r"did not start within 0.05 s \(1 of its handshakes queued\)"):
        await grants.grant("ws_a", ("s2", 5), 0.05)
    assert grants.pending("ws_a") == 0
    stmts.release.set()
    assert await holder is True
    assert stmts.groups == [("ws_a", ["s1"])]
    assert grants.active() == 0


async def test_a_handshake_cancelled_while_its_statement_runs_gives_its_slot_back_and_a_queued_one_is_never_settled():
    stmts = Statements()
    grants = Grants(stmts.settle, stmts.undo)
    stmts.release.clear()
    kept = asyncio.create_task(grants.grant("ws_a", ("s1", 5), None))
    dropped = asyncio.create_task(grants.grant("ws_a", ("s2", 5), None))
    await asyncio.sleep(0.01)
    assert stmts.groups == [("ws_a", ["s1", "s2"])]  # one statement for both, running
    queued = asyncio.create_task(grants.grant("ws_a", ("s3", 5), None))
    await asyncio.sleep(0.01)
    assert grants.pending("ws_a") == 1
    queued.cancel()  # the client went away before its statement
    dropped.cancel()  # the client went away while its statement ran
    await asyncio.sleep(0.01)
    assert grants.pending("ws_a") == 0
    stmts.release.set()
    assert await kept is True
    for task in (dropped, queued):
        with pytest.raises(asyncio.CancelledError):
            await task
    await asyncio.sleep(0.01)
    assert stmts.groups == [("ws_a", ["s1", "s2"])]  # s3 never reached a statement
    assert stmts.undone == ["s2"]  # s2's slot was granted, then given back
    assert grants.active() == 0


async def test_a_failed_statement_answers_its_whole_group_and_the_next_group_still_settles():
    stmts = Statements()
    grants = Grants(stmts.settle, stmts.undo)
    stmts.release.clear()
    stmts.fail = StorageUnavailable("acquire stream lease: database unavailable")
    first = asyncio.create_task(grants.grant("ws_a", ("s1", 5), None))
    await asyncio.sleep(0.01)
    later = asyncio.create_task(grants.grant("ws_a", ("s2", 5), None))
    stmts.release.set()
    with pytest.raises(StorageUnavailable, match="database unavailable"):
        await first
    assert await later is True
    assert grants.active() == 0


async def test_stopping_answers_every_waiting_handshake_with_a_503():
    stmts = Statements()
    grants = Grants(stmts.settle, stmts.undo)
    stmts.release.clear()
    waiting = [asyncio.create_task(grants.grant("ws_a", (f"s{i}", 5), None)) for i in range(3)]
    await asyncio.sleep(0.01)
    await grants.stop()
    for task in waiting:
        with pytest.raises(StorageUnavailable, match="stopping"):
            await task
    assert grants.active() == 0 and grants.pending("ws_a") == 0
