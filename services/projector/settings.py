"""The projector's settings: the shared contract (:class:`..common.runtime.config.Config`) and its own."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.runtime.config import Config, option
from ..common.runtime.errors import ConfigError

#: The values of ``projector_synchronous_commit`` (PostgreSQL's ``synchronous_commit`` of the
#: projector's sessions) that keep what the projector committed across a crash of PostgreSQL.
DURABLE_COMMITS = ("on", "remote_write", "remote_apply", "local")


@dataclass(frozen=True)
class ProjectorConfig(Config):
    """What a projector process reads: the shared settings and these, its own."""

    projector_admin_port: int = option(9082, "admin port of the projector (its only listener)")
    projector_group: str = option("tickerwire-projector", "consumer group of the projectors")
    projector_group_instance_id: str = option(
        "",
        "static membership in the group (KIP-345): a stable id per projector replica, unique in the "
        "group (a pod or host name); a restarted projector takes its partitions back at once instead "
        "of after the session timeout, and a planned stop leaves the group at once; empty: dynamic "
        "membership",
    )
    projector_group_join_timeout_s: float = option(
        30.0,
        "a consumer-group join not complete within this is a stall: readiness names it, an ERROR "
        "line, `tickerwire_projector_group_joining_seconds`; the consumer is then replaced",
    )
    projector_batch_max: int = option(2_000, "records per fetch of the projector", least=1)
    sweep_interval_s: float = option(3600.0, "badge sweeper tick")
    projector_synchronous_commit: str = option(
        "on",
        "PostgreSQL's `synchronous_commit` for the projector's batches: `on` (a batch is visible to "
        "readers, pushed and handed out in cursors only once its WAL is flushed, and on a synchronous "
        "standby when `synchronous_standby_names` is set), `remote_apply`, `remote_write` or `local`; "
        "`off` is faster and a PostgreSQL crash then forgets the last instant of batches, which the "
        "projector applies again, after they may have been pushed (docs/api.md#durability)",
    )

    projector_schema_registry_url: str = option(
        "",
        "a schema registry (Confluent's REST API: Confluent, Apicurio, Karapace) in which the schema id of a "
        "record framed by a registry serializer is looked up; an id it does not know is a dead letter "
        "(`unknown_schema_id`); empty: the id is recorded, not looked up",
    )
    projector_schema_registry_timeout_s: float = option(
        2.0, "bound of one schema-id lookup; a registry that does not answer is retried with backoff"
    )

    def check(self) -> None:
        super().check()
        if self.projector_synchronous_commit not in (*DURABLE_COMMITS, "off"):
            raise ConfigError(
                f"TICKERWIRE_PROJECTOR_SYNCHRONOUS_COMMIT={self.projector_synchronous_commit!r} is invalid: "
                f"use one of {', '.join((*DURABLE_COMMITS, 'off'))}"
            )
