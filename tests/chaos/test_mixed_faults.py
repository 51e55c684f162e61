"""The mixed-fault run under pytest: a fixed seed, about 2.5 minutes of faults (SIGKILL and
SIGSTOP of every service process, a webhook dispatcher SIGKILLed, a webhook receiver down for
5 to 8 s, the replica killed and frozen, the primary restarted, crashed and failed over to the
standby, the broker restarted, the services' network cut or slowed) under the whole workload,
two flaky webhook receivers included; every check of tests/chaos/checker.py must hold. The
seed is one whose faults include a dispatcher SIGKILL, a primary crash, a receiver outage and
a failover early on (in that order, in the first 45 s or so; a second failover, another
dispatcher SIGKILL and another crash follow). The report goes to chaos-results/ as with
``python -m tests.chaos.run``."""

from __future__ import annotations

import pytest

from tests.chaos.run import results_dir, run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEED = 562
MINUTES = 2.5


@pytest.mark.timeout(600)  # 2.5 min of faults, start-up, catch-up and the checks: about 4 min
async def test_mixed_faults_lose_nothing_double_nothing_and_never_read_stale_nor_send_out_of_order():
    report = await run(MINUTES, SEED, results_dir(SEED))
    assert report["faults"] and report["announcements"] > 300 and all(report["deliveries"].values())
    assert report["faults"].get("kill dispatcher") and report["faults"].get("receiver outage"), report["faults"]
    assert all(hooked["acknowledged"] > 100 for hooked in report["webhooks"].values()), report["webhooks"]
    assert not report["violations"], f"seed {SEED}: the first violation: {report['violations'][0]}"
