"""The capacity run's harness, briefly (tests/benchmarks/capacity.py): the production shape (three
Kafka nodes, PgBouncer, two api and two stream processes on shared ports) under a low open-loop
load, 200 stream connections and posts flowing for 10 s. No speed is asserted (a real run's
figures are in docs/capacity.md); the report must be whole, and at this load nothing may fail."""

from __future__ import annotations

import pytest

from tests.benchmarks import capacity
from tests.support import pgbouncer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.capacity,
    pytest.mark.skipif(pgbouncer.binary() is None, reason="pgbouncer is not installed (apt-get install pgbouncer)"),
]

OPTIONS = capacity.Options(seconds=10, rate=40, connections=200, workspaces=40, posts_per_s=5)


async def test_a_short_capacity_run_reports_every_endpoint_and_every_delivery():
    report = await capacity.capacity(OPTIONS)

    rows = {e["endpoint"]: e for e in report["endpoints"]}
    assert list(rows) == [label for label, _, _ in capacity.ENDPOINTS]
    for label, row in rows.items():
        assert row["requests"] > 0, label
        assert (row["errors"], row["skipped"]) == (0, 0), row
        for figure in ("p50_ms", "p99_ms", "max_ms"):
            assert row[figure] is not None and row[figure] >= 0, row

    stream = report["stream"]
    assert stream["connections"] == OPTIONS.connections
    assert stream["posts_published"] == OPTIONS.seconds * OPTIONS.posts_per_s
    # Every connection got every post of the window, in every locale, once.
    assert stream["connections_missing_a_post"] == 0, stream
    assert stream["deliveries"] == stream["deliveries_expected"], stream
    assert stream["duplicates"] == 0
    assert stream["delivery_p99_ms"] is not None
    # The kernel spread the connections over both stream processes (SO_REUSEPORT).
    spread = report["connections_per_stream_process"]
    assert len(spread) == 2 and all(n > 0 for n in spread) and sum(spread) == OPTIONS.connections, spread

    for label in ("kafka node 1", "kafka node 2", "kafka node 3", "pgbouncer", "postgresql (postmaster + backends)"):
        assert report["processes"][label]["cpu_seconds"] >= 0
    assert report["per_core"]["api_requests_per_cpu_second"] > 0
    assert "| `/search` |" in capacity.render(report)
