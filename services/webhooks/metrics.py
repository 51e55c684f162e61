"""Every metric the webhook dispatcher exports, registered on an injectable registry
(docs/operations.md#webhook-alerts reads them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from .schedule import AttemptResult

OUTCOMES = ("delivered", "failed", "gone", "refused")
STATES = ("active", "failing", "paused", "disabled")


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.backlog_age = Gauge(
            "tickerwire_webhooks_backlog_age_seconds",
            "How long the oldest message an endpoint has not acknowledged has waited (0: caught up)",
            ["endpoint"],
            registry=r,
        )
        self.attempts = Counter(
            "tickerwire_webhooks_attempts_total", "Delivery attempts by outcome", ["outcome"], registry=r
        )
        for outcome in OUTCOMES:
            self.attempts.labels(outcome)
        self.endpoints = Gauge(
            "tickerwire_webhooks_endpoints",
            "Endpoints this process delivers to (active, failing), and paused or disabled ones in the deployment",
            ["state"],
            registry=r,
        )
        for state in STATES:
            self.endpoints.labels(state)
        self.disabled = Gauge(
            "tickerwire_webhooks_disabled_endpoints",
            "Endpoints disabled in the whole deployment (every process reports the same number)",
            registry=r,
        )
        self.last_round = Gauge(
            "tickerwire_webhooks_loop_last_run_timestamp_seconds",
            "Unix time of this dispatcher's last scheduling round (every second when healthy)",
            registry=r,
        )
        self.latency = Histogram(
            "tickerwire_webhooks_delivery_seconds",
            "Duration of one delivery attempt, any outcome",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.worker_crashes = Counter(
            "tickerwire_webhooks_worker_crashes_total",
            "Endpoint workers that ended with an unexpected error (restarted at the next round)",
            registry=r,
        )

    def attempted(self, result: AttemptResult, exemplar: dict[str, str] | None = None) -> None:
        """One attempt counted by its outcome and its latency observed (``exemplar``: its trace)."""
        self.attempts.labels(result.outcome).inc()
        self.latency.observe(result.latency_s, exemplar)
