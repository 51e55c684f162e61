"""The mixed-fault run under pytest: a fixed seed, about 2.5 minutes of faults (SIGKILL and
SIGSTOP of every service process, the replica killed and frozen, the primary restarted, crashed
and failed over to the standby, the broker restarted, the services' network cut or slowed) under
the whole workload; every check of tests/chaos/checker.py must hold. The seed is one whose
faults include a primary crash and a failover early on (at about 7 and 14 s; a crash, a restart
of the primary and the new standby killed follow). The report goes to chaos-results/ as with
``python -m tests.chaos.run``."""

from __future__ import annotations

import pytest

from tests.chaos.run import results_dir, run
from tests.support.containers import on_apache_kafka, why_not_apache_kafka

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEED = 97
MINUTES = 2.5


@pytest.mark.skipif(not on_apache_kafka(), reason=why_not_apache_kafka())
@pytest.mark.timeout(600)  # 2.5 min of faults, start-up, catch-up and the checks: about 4 min
async def test_mixed_faults_lose_nothing_double_nothing_and_never_read_stale():
    report = await run(MINUTES, SEED, results_dir(SEED))
    assert report["faults"] and report["announcements"] > 300 and all(report["deliveries"].values())
    assert not report["violations"], f"seed {SEED}: the first violation: {report['violations'][0]}"
