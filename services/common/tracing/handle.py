"""The tracing handle every process holds, and what its callers pass around.

:class:`Tracing` itself is tracing switched off: every method a branch and nothing more (no
span, no allocation, nothing of OpenTelemetry imported). :func:`build` returns it when the
configuration says off, and the SDK-backed handle (:mod:`.sdk`) when on.
"""

from __future__ import annotations

import enum
from typing import Any, Iterator, Mapping, MutableMapping, Sequence

from prometheus_client import CollectorRegistry

from ..runtime.errors import ConfigError
from .config import TracingConfig

#: Kafka record headers (aiokafka's shape) or HTTP headers.
Headers = Sequence[tuple[str, bytes]] | Mapping[str, str]
#: Headers a context is written into: a Kafka header list or an HTTP header dict.
Carrier = list[tuple[str, bytes]] | MutableMapping[str, str]


class Kind(enum.Enum):
    INTERNAL = "internal"
    SERVER = "server"
    CLIENT = "client"
    PRODUCER = "producer"
    CONSUMER = "consumer"


class Parent:
    """A span context to start a span under or to link to (opaque: what :meth:`Tracing.extract`
    read, or a span's own). :data:`ROOT` starts a new trace."""

    __slots__ = ("context",)

    def __init__(self, context: Any) -> None:
        self.context = context


#: ``parent=ROOT``: the span starts a trace of its own, whatever span is current.
ROOT = Parent(None)


class Span:
    """A span being recorded; this base records nothing (tracing off)."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def record_error(self, exc: BaseException) -> None:
        pass

    def fail(self, description: str) -> None:
        """Mark the span failed without an exception (an HTTP server's 5xx answer)."""

    def end(self) -> None:
        pass

    @property
    def parent(self) -> Parent | None:
        """This span as a parent or a link of others (None when tracing is off)."""
        return None


class _NoSpan:
    """``with tracing.start(...) as span`` when off: one shared object, nothing allocated."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return NO_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


NO_SPAN = Span()
_NO_SPAN_CONTEXT = _NoSpan()


class Tracing:
    """Tracing off. The SDK-backed handle (:class:`.sdk.SdkTracing`) overrides every method."""

    enabled = False

    def start(
        self,
        name: str,
        kind: Kind = Kind.INTERNAL,
        parent: Parent | None = None,
        links: Sequence[Parent] = (),
        attributes: Mapping[str, Any] | None = None,
    ) -> Any:
        """A context manager: a span current while it runs, ended on the way out (an exception
        marks it failed). ``parent`` None: the current span's child (a root when there is none);
        :data:`ROOT`: a new trace. Yields the :class:`Span`."""
        return _NO_SPAN_CONTEXT

    def span(
        self,
        name: str,
        kind: Kind = Kind.INTERNAL,
        parent: Parent | None = None,
        links: Sequence[Parent] = (),
        attributes: Mapping[str, Any] | None = None,
    ) -> Span:
        """A span started now and not made current; its owner calls :meth:`Span.end`."""
        return NO_SPAN

    def inject(self, headers: Carrier, span: Span | None = None) -> None:
        """Write ``traceparent`` (and ``tracestate``) of ``span`` (default: the current span) into
        ``headers``, replacing any there; nothing when off or there is no span."""

    def extract(self, headers: Headers) -> Parent | None:
        """The W3C trace context in ``headers``; None when absent or invalid (or off)."""
        return None

    def current_ids(self) -> tuple[str, str] | None:
        """(trace_id, span_id) in hex (32 and 16) of the current span, for logs and exemplars."""
        return None

    def exemplar(self) -> dict[str, str] | None:
        """``{"trace_id": ...}`` of the current span when it is sampled (a histogram's exemplar:
        a trace the backend has), else None."""
        return None

    def shutdown(self, timeout_s: float = 2.0) -> None:
        """Export what is queued (within ``timeout_s``) and stop the export thread."""


#: The handle of a process without tracing (and the default of every traced call).
OFF = Tracing()


#: How the OpenTelemetry SDK is installed, for the messages that say it is missing.
EXTRA = "pip install 'tickerwire[tracing]'"


def sdk_available() -> bool:
    """Whether the ``tracing`` extra's SDK can be imported here (nothing of it is imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except ModuleNotFoundError:  # not even the opentelemetry package
        return False


def build(config: TracingConfig, registry: CollectorRegistry | None = None) -> Tracing:
    """The process's handle: :data:`OFF` when ``config`` says off, else the SDK's, exporting on
    its own thread and counting on ``registry``. Configured on without the ``tracing`` extra:
    :class:`ConfigError` naming it."""
    if not config.enabled:
        return OFF
    try:
        from .sdk import SdkTracing
    except ImportError as exc:
        raise ConfigError(
            f"tracing is configured (OTEL_EXPORTER_OTLP_ENDPOINT) but the OpenTelemetry SDK is missing ({exc.name}): "
            f"install the extra, {EXTRA}"
        ) from None
    return SdkTracing(config, registry or CollectorRegistry())


def iter_headers(headers: Headers) -> Iterator[tuple[str, str]]:
    """(name, text value) of Kafka or HTTP headers."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if isinstance(value, (bytes, bytearray)):
            yield key, value.decode("latin-1")
        elif isinstance(value, str):
            yield key, value
