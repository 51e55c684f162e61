"""While the projector cannot consume, its readiness and an ERROR line name the cause (an
unreachable broker here: nothing listens at the address), not only that it does not fetch."""

from __future__ import annotations

from tests.support.projector import projector_on
from tests.support.wait import background, until
from tickerwire.devstack.embedded.ports import free_port
from tickerwire.services.common.runtime import retry


async def test_readiness_and_an_error_line_name_why_the_projector_does_not_consume(fresh_db, caplog, monkeypatch):
    monkeypatch.setattr(retry, "ERROR_AFTER_S", 1.0)
    async with projector_on(fresh_db, kafka_bootstrap_servers=f"127.0.0.1:{free_port()}") as (projector, _, _):
        async with background(projector.run()):
            await until(lambda: "broker error" in projector.consuming(10.0)[1], 30, "readiness naming the broker error")
            ready, reason = projector.consuming(10.0)
            assert not ready and reason.startswith("catching up (broker error: KafkaConnectionError")
            await until(
                lambda: any(
                    r.levelname == "ERROR" and "has not applied a fetch" in r.getMessage() for r in caplog.records
                ),
                30,
                "an ERROR line",
            )
    error = next(
        r.getMessage() for r in caplog.records if r.levelname == "ERROR" and "has not applied a fetch" in r.getMessage()
    )
    assert "broker error: KafkaConnectionError" in error
