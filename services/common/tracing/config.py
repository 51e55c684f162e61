"""Tracing's settings: the standard ``OTEL_*`` variables, read once at start into a frozen object.

Tracing is off unless an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``, or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` used as given); ``OTEL_SDK_DISABLED=true`` forces it
off. A value that cannot be parsed stops the process with one line (:class:`ConfigError`),
whether tracing is on or not: a typo is not silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping
from urllib.parse import unquote, urlsplit

from ..runtime.errors import ConfigError

#: ``OTEL_TRACES_SAMPLER`` values this product understands (the SDK's built-in samplers).
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
TRACES_PATH = "/v1/traces"


@dataclass(frozen=True, slots=True)
class TracingConfig:
    #: Where spans are sent (OTLP over HTTP/protobuf); empty: tracing is off.
    endpoint: str = ""
    service_name: str = ""
    sampler: str = "parentbased_always_on"
    #: The ratio of the ``*traceidratio`` samplers (``OTEL_TRACES_SAMPLER_ARG``), 0 to 1.
    sampler_arg: float = 1.0
    resource_attributes: tuple[tuple[str, str], ...] = ()
    max_queue_size: int = 2048
    max_export_batch_size: int = 512
    schedule_delay_s: float = 1.0
    export_timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint)

    @classmethod
    def from_env(cls, env: Mapping[str, str], process: str) -> TracingConfig:
        """The settings of ``process`` (its default service name, e.g. ``tickerwire-projector``)."""
        disabled = _bool(env, "OTEL_SDK_DISABLED")
        resource = _resource_attributes(env.get("OTEL_RESOURCE_ATTRIBUTES", ""))
        named = dict(resource).get("service.name", "")
        sampler = (env.get("OTEL_TRACES_SAMPLER") or "parentbased_always_on").strip().lower()
        if sampler not in SAMPLERS:
            raise ConfigError(f"OTEL_TRACES_SAMPLER={sampler!r} is invalid: use one of {', '.join(SAMPLERS)}")
        ratio = _number(env, "OTEL_TRACES_SAMPLER_ARG", 1.0, float)
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG={ratio!r} is invalid: a ratio from 0 to 1")
        queue = _number(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, int)
        batch = _number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, int)
        if batch > queue:
            raise ConfigError(
                f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE ({batch}) must not exceed OTEL_BSP_MAX_QUEUE_SIZE ({queue})"
            )
        return cls(
            endpoint="" if disabled else _endpoint(env),
            service_name=(env.get("OTEL_SERVICE_NAME") or "").strip() or named or process,
            sampler=sampler,
            sampler_arg=ratio,
            resource_attributes=tuple((k, v) for k, v in resource if k != "service.name"),
            max_queue_size=queue,
            max_export_batch_size=batch,
            schedule_delay_s=_number(env, "OTEL_BSP_SCHEDULE_DELAY", 1000, int) / 1000,
            export_timeout_s=_number(env, "OTEL_EXPORTER_OTLP_TIMEOUT", 10_000, int) / 1000,
        )


def _bool(env: Mapping[str, str], var: str) -> bool:
    raw = (env.get(var) or "").strip().lower()
    if raw in ("", "false"):
        return False
    if raw == "true":
        return True
    raise ConfigError(f"{var}={raw!r} is invalid: use true or false")


def _number(env: Mapping[str, str], var: str, default, kind):
    """A positive number of ``kind`` (milliseconds, sizes; the ratio may be 0)."""
    raw = (env.get(var) or "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r} is invalid: expected {'an integer' if kind is int else 'a number'}") from None
    if value != value or value < 0 or (value == 0 and kind is int):
        raise ConfigError(f"{var}={raw!r} is invalid: expected a positive number")
    return value


def _endpoint(env: Mapping[str, str]) -> str:
    traces = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    base = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    var, url = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces) if traces else ("OTEL_EXPORTER_OTLP_ENDPOINT", base)
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise ConfigError(f"{var}={url!r} is invalid: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{var}={url!r} is invalid: expected an http:// or https:// URL")
    return url if traces else url.rstrip("/") + TRACES_PATH


def _resource_attributes(raw: str) -> tuple[tuple[str, str], ...]:
    """``key=value,key=value`` (values percent-encoded), as the specification writes them."""
    out = []
    for item in raw.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"OTEL_RESOURCE_ATTRIBUTES has an invalid entry {item.strip()!r}: expected key=value")
        out.append((key.strip(), unquote(value.strip())))
    return tuple(out)
