"""Failover to the promoted standby under the whole workload: the primary SIGKILLed, the
standby promoted, and the old primary's data wiped and rebuilt as the new primary's standby.
The services are not restarted: their ``TICKERWIRE_DATABASE_URL`` names both servers with
``target_session_attrs=read-write`` and must find the new primary by themselves.

With synchronous replication (the harness's servers: a named synchronous standby), twice in a
minute (20 to 25 s apart; the second goes back to the first server): a commit made with
``synchronous_commit = on`` is on the standby before it returns, so nothing pushed before a
failover may be missing after it: none of the pairs pushed in the 15 s before the SIGKILL
unserved by ``GET`` as soon as the API answers, and at the end 0 lost (``GET``, ``/changes``,
every stream client), 0 pushed or walked twice, 0 issued cursors refused, every check of
tests/chaos/checker.py holding, no process restarted, and after each failover the API serving
``GET /posts`` within :data:`API_BOUND_S` of the SIGKILL and every process ready within
:data:`READY_BOUND_S`.

Without it, once, with a standby 2 s behind: what partners see of the lost window."""

from __future__ import annotations

import pytest

from tests.chaos.run import results_dir, run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEED = 44
MINUTES = 1.0
GAP_S = (20.0, 25.0)
#: From the SIGKILL of the primary to the API serving ``GET /posts`` again (its admission, a
#: write, granted by the new primary): 0.24 to 1.52 s measured in 8 failovers; a shared 2-core
#: machine may be several times slower.
API_BOUND_S = 10.0
#: From the SIGKILL to every process ready, the old primary rebuilt meanwhile: 0.9 to 3.8 s measured.
READY_BOUND_S = 20.0


@pytest.mark.timeout(420)  # 1 min of failovers, start-up, catch-up and the checks: about 2.5 min
async def test_a_failover_to_the_synchronous_standby_loses_nothing_and_needs_no_restart():
    report = await run(MINUTES, SEED, results_dir(SEED), kinds={"failover primary": 1}, gap_s=GAP_S)
    failovers = report["failovers"]
    assert len(failovers) >= 2 and report["announcements"] > 150 and all(report["deliveries"].values()), failovers
    took = [{k: round(f[k] - f["killed"], 2) for k in ("promoted", "api", "ready", "rebuilt")} for f in failovers]
    assert all(t["api"] <= API_BOUND_S and t["ready"] <= READY_BOUND_S for t in took), took
    # Nothing pushed before a failover is missing after it, as soon as the API answers.
    assert all(f["pushed"] > 0 and f["unreadable"] == 0 for f in failovers), failovers
    assert not report["restarts"], f"processes restarted: {report['restarts']}"
    assert report["tally"] == {"lost": 0, "doubled": 0, "refused": 0}, (
        f"seed {SEED}, failovers {took}: {report['tally']}; violations: {report['violations'][:8]}"
    )
    assert not report["violations"], f"seed {SEED}: the first violation: {report['violations'][0]}"


ASYNCHRONOUS = {"synchronous_standby_names": ""}
ASYNC_SEED = 45


@pytest.mark.timeout(420)  # half a minute of workload, one failover, catch-up and the checks: about 1.5 min
async def test_a_failover_to_a_lagging_asynchronous_standby_loses_nothing_for_good():
    """Without synchronous replication, one failover to a standby 2 s behind (``failover
    lagging``): the projector's commits of those 2 s are not on the new primary. The projector
    finds its stored positions behind where it stored them, reads the records again and
    projects them anew: the pairs pushed before the failover may be unreadable for a moment
    (counted: the report's failover line), none is lost for good, and the counts of what was
    doubled or refused are what partners see (docs/reliability.md). Measured: 17 of the 88
    pairs pushed in the 15 s before the SIGKILL unreadable when the API answered again (0.55 s
    after it), re-projected within about 2 s; 0 lost, 0 doubled, 0 refused. In another run the
    projector had re-projected them all before the first ``GET`` (0 of 82 unreadable), so the
    test does not count on that race: it asserts that the failover did lose a window, read from
    the standby itself before its promotion (pushed pairs it did not hold: so the test exercises
    what it states), and that nothing is lost for good."""
    report = await run(
        0.5,
        ASYNC_SEED,
        results_dir(ASYNC_SEED),
        kinds={"failover lagging": 1},
        gap_s=(15.0, 20.0),
        server_settings=ASYNCHRONOUS,
    )
    (failover,) = report["failovers"]
    assert failover["missing"] > 0, f"the standby was not behind: no window lost {failover}"
    assert report["tally"]["lost"] == 0, f"{report['tally']}, {failover}: {report['violations'][:8]}"
    assert not report["restarts"], f"processes restarted: {report['restarts']}"
