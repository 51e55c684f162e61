"""The PostgreSQL primary crashed again and again under the whole workload: SIGKILL of its
postmaster and every process of it every 3 to 5 s for 1.75 minutes, each time started again on
the same data (crash recovery), while posts are published, stream clients resume with cursors,
a walker follows ``/changes`` and readers demand freshness. Nothing acknowledged may be lost
(``GET`` serves it, the walk and every client have it), nothing pushed or walked twice, no
cursor the service issued refused; and every other check of tests/chaos/checker.py holds.

A commit the projector made with ``synchronous_commit = off`` that had not reached the WAL
when the server died is gone after recovery, though it may have been pushed and its cursor
handed out: the three counts are what that costs partners. The servers write their WAL every
200 ms (``wal_writer_delay``, PostgreSQL's default and what ``tickerwire up`` runs with), not
every 10 ms as in the mixed-fault run: with 10 ms, 25 crashes of a run hit no commit that had
not reached the WAL yet, and the test could not tell the old code from a fixed one."""

from __future__ import annotations

import pytest

from tests.chaos.run import results_dir, run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEED = 43
MINUTES = 1.75
GAP_S = (3.0, 5.0)
SETTINGS = {"wal_writer_delay": "200ms"}


@pytest.mark.timeout(480)  # 1.75 min of crashes, start-up, catch-up (at most 2 min) and the checks
async def test_primary_crashes_lose_nothing_double_nothing_and_refuse_no_issued_cursor():
    report = await run(
        MINUTES, SEED, results_dir(SEED), kinds={"crash primary": 1}, gap_s=GAP_S, server_settings=SETTINGS
    )
    crashes = report["faults"].get("crash primary", 0)
    assert crashes >= 15 and report["announcements"] > 300 and all(report["deliveries"].values()), report["faults"]
    assert report["tally"] == {"lost": 0, "doubled": 0, "refused": 0}, (
        f"seed {SEED}, {crashes} crashes: {report['tally']}; violations: {report['violations'][:8]}"
    )
    assert not report["violations"], f"seed {SEED}: the first violation: {report['violations'][0]}"
