"""Finished spans to the backend, never in the way: a bounded queue and one export thread.

A span that finds the queue full is dropped and counted (``reason="queue_full"``); a batch the
exporter could not send within its timeout (backend down or slow) is dropped and counted
(``reason="export_failed"``). Nothing waits for the backend but this module's own thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Sequence

from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger(__name__)

QUEUE_FULL = "queue_full"
EXPORT_FAILED = "export_failed"


class SpanCounters:
    """``tickerwire_trace_spans_dropped_total{reason}`` and ``tickerwire_trace_spans_exported_total``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = Counter(
            "tickerwire_trace_spans_dropped_total",
            "Finished spans never exported: the queue was full, or the exporter failed to send their batch",
            ["reason"],
            registry=registry,
        )
        self.queue_full = self.dropped.labels(QUEUE_FULL)
        self.export_failed = self.dropped.labels(EXPORT_FAILED)
        self.exported = Counter(
            "tickerwire_trace_spans_exported_total", "Finished spans the backend accepted", registry=registry
        )


class ExportQueue:
    """Holds at most ``max_queue`` finished spans; a daemon thread sends them in batches of at
    most ``max_batch``, at least every ``delay_s``. ``send(batch)`` returns whether the backend
    took it (the exporter bounds its own wait)."""

    def __init__(
        self,
        send: Callable[[Sequence[Any]], bool],
        counters: SpanCounters,
        *,
        max_queue: int,
        max_batch: int,
        delay_s: float,
        name: str = "trace-export",
    ) -> None:
        self._send = send
        self.counters = counters
        self.max_queue, self.max_batch, self.delay_s = max_queue, max_batch, delay_s
        self._spans: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._failing_since: float | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, span: Any) -> None:
        """Queue one finished span, or drop and count it when the queue is full (never waits)."""
        with self._cond:
            if self._stopping or len(self._spans) >= self.max_queue:
                self.counters.queue_full.inc()
                return
            self._spans.append(span)
            if len(self._spans) == self.max_batch:
                self._cond.notify()

    def close(self, timeout_s: float) -> bool:
        """Send what is queued and stop the thread, waiting at most ``timeout_s``; True when done."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _take(self) -> tuple[list[Any], bool]:
        with self._cond:
            if len(self._spans) < self.max_batch and not self._stopping:
                self._cond.wait(self.delay_s)
            batch = [self._spans.popleft() for _ in range(min(self.max_batch, len(self._spans)))]
            return batch, self._stopping and not self._spans

    def _run(self) -> None:
        while True:
            batch, done = self._take()
            if batch:
                self._export(batch)
            if done:
                return

    def _export(self, batch: list[Any]) -> None:
        try:
            ok = self._send(batch)
        except Exception:  # an exporter bug must not end the thread: the batch is lost, counted
            log.exception("trace export raised; %d spans dropped", len(batch))
            ok = False
        if ok:
            self.counters.exported.inc(len(batch))
            if self._failing_since is not None:
                log.warning("trace export works again after %.0f s", time.monotonic() - self._failing_since)
                self._failing_since = None
            return
        self.counters.export_failed.inc(len(batch))
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning(
                "trace export failed; spans are dropped (tickerwire_trace_spans_dropped_total) until it works again"
            )
