"""Every metric the projector exports, registered on an injectable registry."""

from __future__ import annotations

from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..common import kafka

#: Every reason kind a dead letter can have (``dead_letters.reason_kind``): the record could not
#: be decoded by the consumer (codec, corrupt_batch), its value is not JSON (undecodable), its
#: schema-registry frame names a schema the configured registry does not know (unknown_schema_id),
#: it is not a known event (unknown_type), of a ``schema_version`` this release does not know
#: (unknown_schema_version) or not valid (schema), it travels on the wrong topic (wrong_topic), or
#: the read model refused it (rejected).
DEAD_LETTER_KINDS = (
    kafka.CODEC,
    kafka.CORRUPT_BATCH,
    "undecodable",
    "unknown_schema_id",
    "unknown_type",
    "unknown_schema_version",
    "schema",
    "wrong_topic",
    "rejected",
)
#: The label values the alerts read, created at 0 so that the first increase is seen (a series
#: born at 1 has no increase) and a projector that applied nothing still has a series.
APPLIED_TYPES = (
    "post",
    "locale",
    "category",
    "token",
    "workspace",
    "api_key",
    "embed",
    "heartbeat",
    "webhook_endpoint",
)


class ProjectorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events_applied = Counter(
            "tickerwire_projector_events_applied_total", "Events applied to the read model", ["type"], registry=r
        )
        self.events_stale = Counter(
            "tickerwire_projector_events_stale_total", "Events ignored because a newer version was stored", registry=r
        )
        self.redelivered = Counter(
            "tickerwire_projector_records_redelivered_total",
            "Records skipped because their offset was already stored",
            registry=r,
        )
        self.dead_lettered = Counter(
            "tickerwire_projector_dead_lettered_total",
            "Records set aside in dead_letters, by reason kind",
            ["reason"],
            registry=r,
        )
        for kind in DEAD_LETTER_KINDS:  # every series exists from the start, at 0: alerts need it
            self.dead_lettered.labels(kind)
        for kind in APPLIED_TYPES:
            self.events_applied.labels(kind)
        self.batch_size = Histogram(
            "tickerwire_projector_batch_size",
            "Records per applied batch",
            buckets=(1, 5, 10, 50, 100, 500, 1000, 2000, 5000),
            registry=r,
        )
        self.batch_seconds = Histogram(
            "tickerwire_projector_batch_seconds",
            "Time to apply and commit one batch",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.position = Gauge(
            "tickerwire_projector_position", "Next offset to apply, per partition", ["topic", "partition"], registry=r
        )
        self.lag = Gauge(
            "tickerwire_projector_lag",
            "Offsets between the stored position and the partition's last stable offset (0 once every readable record is applied)",
            ["topic", "partition"],
            registry=r,
        )
        self.log_discontinuity = Gauge(
            "tickerwire_projector_log_discontinuity",
            "1 while a partition's projection is stopped because the log no longer holds its stored position "
            "(log reset, topic re-created, records deleted unread); see `tickerwire projector accept-log`",
            ["topic", "partition"],
            registry=r,
        )
        self.newest_event_age = Gauge(
            "tickerwire_projector_newest_event_age_seconds",
            "Age of the newest projected event (now - its emitted_at), at scrape time",
            registry=r,
        )
        self._newest_emitted: datetime | None = None
        self.newest_event_age.set_function(self._newest_age)
        self.group_joining = Gauge(
            "tickerwire_projector_group_joining_seconds",
            "How long this projector's consumer-group join (or rejoin) has been under way, at scrape time; "
            "0 while it is a member with its partitions assigned",
            registry=r,
        )
        self.retries = Counter("tickerwire_projector_retries_total", "Transient failures retried", ["what"], registry=r)
        self.position_rewinds = Counter(
            "tickerwire_projector_position_rewinds_total",
            "Times a partition's stored position was found behind where this projector had stored it "
            "(commits lost by a PostgreSQL crash or failover, or `projector accept-log`); the partition "
            "is read again from the stored position",
            ["topic", "partition"],
            registry=r,
        )
        self.sweeps = Counter("tickerwire_projector_badge_sweeps_total", "Badge sweeper ticks", registry=r)

    def saw_event(self, emitted_at: datetime) -> None:
        """Record a committed event's emission time; the age gauge reports the newest one."""
        if self._newest_emitted is None or emitted_at > self._newest_emitted:
            self._newest_emitted = emitted_at

    def _newest_age(self) -> float:
        if self._newest_emitted is None:
            return float("nan")
        return (datetime.now(timezone.utc) - self._newest_emitted).total_seconds()
