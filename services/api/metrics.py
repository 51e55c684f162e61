"""Every metric the read API exports, registered on an injectable registry.

The two per-request series (requests by route and status, time to answer by route) are plain
counters in :class:`RequestStats`, turned into Prometheus families only when scraped: a
``prometheus_client`` counter and histogram cost about 5 µs per request (a lock each, a label
lookup), a measurable share of a request answered from memory.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class RequestStats(Collector):
    """``tickerwire_api_requests_total{route,status}`` and ``tickerwire_api_request_seconds{route}``,
    counted without locks (the event loop's thread only) and exported at scrape time."""

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self._bounds = buckets
        self._counts: dict[tuple[str, int], int] = {}  # bounded: routes x statuses
        self._latency: dict[str, list] = {}  # route -> [count per bucket (+Inf last)..., sum]

    def observe(self, route: str, status: int, seconds: float) -> None:
        key = (route, status)
        self._counts[key] = self._counts.get(key, 0) + 1
        series = self._latency.get(route)
        if series is None:
            series = self._latency[route] = [0] * (len(self._bounds) + 1) + [0.0]
        series[bisect_left(self._bounds, seconds)] += 1
        series[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "tickerwire_api_requests_total", "Partner requests by route and status", labels=["route", "status"]
        )
        for (route, status), n in sorted(self._counts.items()):
            requests.add_metric([route, str(status)], n)
        yield requests
        latency = HistogramMetricFamily(
            "tickerwire_api_request_seconds", "Time to answer a partner request", labels=["route"]
        )
        for route, series in sorted(self._latency.items()):
            cumulative, buckets = 0, []
            for bound, n in zip([*map(str, self._bounds), "+Inf"], series[:-1]):
                cumulative += n
                buckets.append((bound, cumulative))
            latency.add_metric([route], buckets, series[-1])
        yield latency


class CountsCollector(Collector):
    """A counter family whose values are read from the process's own counts when scraped."""

    def __init__(self, name: str, documentation: str, label: str, read: Callable[[], dict[str, float]]) -> None:
        self._name, self._doc, self._label, self._read = name, documentation, label, read

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self._name, self._doc, labels=[self._label])
        for value, n in self._read().items():
            family.add_metric([value], n)
        yield family


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = RequestStats()
        r.register(self.requests)
        self.rejected = Counter(
            "tickerwire_api_rejected_total", "Requests refused by an access gate", ["code"], registry=r
        )
        self.principals = Gauge("tickerwire_api_principals", "API keys held in memory", registry=r)
        self.access_stamp = Gauge(
            "tickerwire_access_stamp",
            "The access change stamp of the principals this process serves (-1: none yet)",
            registry=r,
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
        self.listener_up = Gauge(
            "tickerwire_api_stamp_listener_up", "1 while the change-stamp listener is connected", registry=r
        )

    def count_page_cache(self, read: Callable[[], dict[str, float]]) -> None:
        """``tickerwire_api_page_cache_total{result}``: pages answered from memory (hit) or built (miss)."""
        self.registry.register(
            CountsCollector(
                "tickerwire_api_page_cache_total",
                "Post pages and details answered from memory (hit) or built (miss)",
                "result",
                read,
            )
        )
