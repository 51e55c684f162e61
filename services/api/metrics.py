"""Every metric the read API exports, registered on an injectable registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tickerwire_api_requests_total", "Partner requests by route and status", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "tickerwire_api_request_seconds", "Time to answer a partner request", ["route"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5), registry=r,
        )
        self.rejected = Counter(
            "tickerwire_api_rejected_total", "Requests refused by an access gate", ["code"], registry=r
        )
