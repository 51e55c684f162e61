"""Tracing (OpenTelemetry), a room just above the runtime: one post followed from a platform
team's producer to a partner (docs/operations.md#tracing).

- :mod:`.config`: :class:`TracingConfig`, the standard ``OTEL_*`` variables;
- :mod:`.handle`: :class:`Tracing`, the handle a process holds (off: every call a branch), the
  :class:`Span`, :class:`Kind` and :class:`Parent` its callers pass, and :func:`build`;
- :mod:`.export`: the bounded queue and export thread, and their counters;
- :mod:`.sdk`: the handle over the OpenTelemetry SDK (the ``tracing`` extra), imported only when
  tracing is on. Nothing outside this room imports ``opentelemetry``.
"""

from __future__ import annotations

from typing import Mapping

from prometheus_client import CollectorRegistry

from .config import TracingConfig
from .handle import EXTRA, NO_SPAN, OFF, ROOT, Carrier, Headers, Kind, Parent, Span, Tracing, build, sdk_available


def from_env(env: Mapping[str, str], process: str, registry: CollectorRegistry | None = None) -> Tracing:
    """The handle of ``process`` (e.g. ``tickerwire-projector``) as ``env`` configures it,
    counting on ``registry``; a ConfigError for a bad value or a missing extra."""
    return build(TracingConfig.from_env(env, process), registry)


__all__ = [
    "EXTRA",
    "NO_SPAN",
    "OFF",
    "ROOT",
    "Carrier",
    "Headers",
    "Kind",
    "Parent",
    "Span",
    "Tracing",
    "TracingConfig",
    "build",
    "from_env",
    "sdk_available",
]
