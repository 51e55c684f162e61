"""Every metric the read API exports, registered on an injectable registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
        self.page_cache = Counter(
            "tickerwire_api_page_cache_total", "Post pages and details answered from memory (hit) or built (miss)",
            ["result"], registry=r,
        )
        self.principals = Gauge("tickerwire_api_principals", "API keys held in memory", registry=r)
        self.access_stamp = Gauge(
            "tickerwire_access_stamp", "The access change stamp of the principals this process serves (-1: none yet)", registry=r
        )
        self.access_fallbacks = Counter(
            "tickerwire_api_access_fallback_total",
            "Access checks answered from the database because the in-memory principals were not confirmed current",
            registry=r,
        )
        self.admission_batches = Counter(
            "tickerwire_api_admission_batches_total", "Group-committed admission statements", registry=r
        )
        self.admissions = Counter(
            "tickerwire_api_admissions_total", "Admissions by where they were decided", ["decided"], registry=r
        )
        self.listener_up = Gauge("tickerwire_api_stamp_listener_up", "1 while the change-stamp listener is connected", registry=r)
