"""The tracing handle over the OpenTelemetry SDK (the ``tracing`` extra): the only module of the
product that imports ``opentelemetry``.

Spans go through :class:`.export.ExportQueue` (not the SDK's batch processor) to the OTLP/HTTP
exporter; the provider is this handle's own, never the process-global one. While a span is
current, every log line carries its ids (the hook of :mod:`..runtime.logs`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Mapping, Sequence

from opentelemetry import context as otel_context, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry

from ..runtime import logs
from .config import TracingConfig
from .export import ExportQueue, SpanCounters
from .handle import Carrier, Headers, Kind, Parent, Span, Tracing, iter_headers

_KINDS = {
    Kind.INTERNAL: SpanKind.INTERNAL,
    Kind.SERVER: SpanKind.SERVER,
    Kind.CLIENT: SpanKind.CLIENT,
    Kind.PRODUCER: SpanKind.PRODUCER,
    Kind.CONSUMER: SpanKind.CONSUMER,
}
_W3C = TraceContextTextMapPropagator()
_FIELDS = ("traceparent", "tracestate")


def sampler(config: TracingConfig) -> sampling.Sampler:
    ratio = sampling.TraceIdRatioBased(config.sampler_arg)
    roots: dict[str, sampling.Sampler] = {"always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF}
    name = config.sampler
    root = roots.get(name.removeprefix("parentbased_"), ratio)
    return sampling.ParentBased(root) if name.startswith("parentbased_") else root


class _Queued(SpanProcessor):
    def __init__(self, queue: ExportQueue) -> None:
        self.queue = queue

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self.queue.put(span)


class SdkSpan(Span):
    __slots__ = ("otel",)

    def __init__(self, otel: trace.Span) -> None:
        self.otel = otel

    def set_attribute(self, key: str, value: Any) -> None:
        self.otel.set_attribute(key, value)

    def record_error(self, exc: BaseException) -> None:
        self.otel.record_exception(exc)
        self.otel.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))

    def fail(self, description: str) -> None:
        self.otel.set_status(Status(StatusCode.ERROR, description))

    def end(self) -> None:
        self.otel.end()

    @property
    def parent(self) -> Parent | None:
        return Parent(trace.set_span_in_context(self.otel, otel_context.Context()))


class SdkTracing(Tracing):
    enabled = True

    def __init__(self, config: TracingConfig, registry: CollectorRegistry) -> None:
        self.config = config
        exporter = OTLPSpanExporter(endpoint=config.endpoint, timeout=config.export_timeout_s)
        # Each failed batch is counted and its outage logged once (:mod:`.export`); the exporter's
        # own line per attempt would repeat that every second while the backend is down.
        logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
        self._exporter = exporter
        self.queue = ExportQueue(
            lambda batch: exporter.export(batch) is SpanExportResult.SUCCESS,
            SpanCounters(registry),
            max_queue=config.max_queue_size,
            max_batch=config.max_export_batch_size,
            delay_s=config.schedule_delay_s,
        )
        attributes = {**dict(config.resource_attributes), "service.name": config.service_name}
        self._provider = TracerProvider(sampler=sampler(config), resource=Resource(attributes), shutdown_on_exit=False)
        self._provider.add_span_processor(_Queued(self.queue))
        self._tracer = self._provider.get_tracer("tickerwire")
        logs.set_trace_ids(self.current_ids)

    def _args(self, parent: Parent | None, links: Sequence[Parent]) -> tuple[Any, list[Link]]:
        context = None if parent is None else parent.context or otel_context.Context()
        return context, [Link(trace.get_current_span(p.context).get_span_context()) for p in links]

    @contextlib.contextmanager
    def start(
        self,
        name: str,
        kind: Kind = Kind.INTERNAL,
        parent: Parent | None = None,
        links: Sequence[Parent] = (),
        attributes: Mapping[str, Any] | None = None,
    ) -> Iterator[Span]:
        context, linked = self._args(parent, links)
        with self._tracer.start_as_current_span(
            name, context=context, kind=_KINDS[kind], links=linked, attributes=attributes
        ) as otel:
            yield SdkSpan(otel)

    def span(
        self,
        name: str,
        kind: Kind = Kind.INTERNAL,
        parent: Parent | None = None,
        links: Sequence[Parent] = (),
        attributes: Mapping[str, Any] | None = None,
    ) -> Span:
        context, linked = self._args(parent, links)
        return SdkSpan(
            self._tracer.start_span(name, context=context, kind=_KINDS[kind], links=linked, attributes=attributes)
        )

    def inject(self, headers: Carrier, span: Span | None = None) -> None:
        context = None
        if isinstance(span, SdkSpan):
            context = trace.set_span_in_context(span.otel, otel_context.Context())
        found: dict[str, str] = {}
        _W3C.inject(found, context=context)
        if not found:
            return
        if isinstance(headers, list):
            headers[:] = [(k, v) for k, v in headers if k.lower() not in _FIELDS]
            headers.extend((k, v.encode("latin-1")) for k, v in found.items())
            return
        for key in [k for k in headers if k.lower() in _FIELDS]:
            del headers[key]
        headers.update(found)

    def extract(self, headers: Headers) -> Parent | None:
        found = {k.lower(): v for k, v in iter_headers(headers) if k.lower() in _FIELDS}
        if "traceparent" not in found:
            return None
        context = _W3C.extract(found, context=otel_context.Context())
        if not trace.get_current_span(context).get_span_context().is_valid:
            return None
        return Parent(context)

    def current_ids(self) -> tuple[str, str] | None:
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return None
        return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")

    def exemplar(self) -> dict[str, str] | None:
        ctx = trace.get_current_span().get_span_context()
        if not (ctx.is_valid and ctx.trace_flags.sampled):
            return None
        return {"trace_id": format(ctx.trace_id, "032x")}

    def shutdown(self, timeout_s: float = 2.0) -> None:
        logs.set_trace_ids(None)
        self.queue.close(timeout_s)
        self._exporter.shutdown()  # aborts a retry still waiting for the backend
