"""One frozen configuration object, read from the environment once at start-up.

Every setting is a ``TICKERWIRE_*`` environment variable (the README has the table);
command-line flags of ``tickerwire`` write the same variables before this is read.
A missing required value or an unparsable one fails loudly with :class:`ConfigError`.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, fields
from typing import Any, Callable, Mapping

from .errors import ConfigError

PREFIX = "TICKERWIRE_"


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected a boolean, got {raw!r}")


@dataclass(frozen=True, slots=True)
class Config:
    database_url: str
    kafka_bootstrap_servers: str
    topic_prefix: str = "tickerwire"
    host: str = "127.0.0.1"
    api_port: int = 8080
    stream_port: int = 8081
    projector_port: int = 8082
    base_path: str = "/api/v1/developer"
    read_model_schema: str = "rm"
    db_pool_min: int = 2
    db_pool_max: int = 10
    log_level: str = "INFO"
    kafka_session_timeout_ms: int = 10_000
    kafka_heartbeat_interval_ms: int = 3_000
    kafka_fetch_max_wait_ms: int = 50
    projector_group: str = "tickerwire-projector"
    projector_batch_max: int = 2_000
    sweep_interval_s: float = 3600.0
    stream_ping_interval_s: float = 30.0
    stream_queue_size: int = 256
    stream_max_connections_per_workspace: int = 5
    stream_lease_ttl_s: float = 10.0
    stream_lease_renew_s: float = 3.0
    stream_access_recheck_s: float = 1.0
    default_rate_limit_per_minute: int = 60
    default_daily_quota: int = 5_000
    max_body_bytes: int = 16_384

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "Config":
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in overrides:
                values[f.name] = overrides[f.name]
                continue
            var = PREFIX + f.name.upper()
            raw = env.get(var)
            if raw is None or raw == "":
                if f.default is MISSING:
                    raise ConfigError(f"{var} is required but not set")
                continue
            parse = _PARSERS.get(f.type if isinstance(f.type, str) else f.type.__name__, str)
            try:
                values[f.name] = parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{var}={raw!r} is invalid: {exc}") from None
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if not self.base_path.startswith("/") or self.base_path.endswith("/"):
            raise ConfigError("TICKERWIRE_BASE_PATH must start with / and not end with /")
        if not self.read_model_schema.isidentifier():
            raise ConfigError("TICKERWIRE_READ_MODEL_SCHEMA must be a plain identifier")
        for name in ("api_port", "stream_port", "projector_port"):
            port = getattr(self, name)
            if not 0 <= port < 65536:
                raise ConfigError(f"TICKERWIRE_{name.upper()} out of range: {port}")

    def topic(self, suffix: str) -> str:
        return f"{self.topic_prefix}.{suffix}"


_PARSERS: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "bool": _bool, "str": str}


def describe() -> list[tuple[str, str]]:
    """(variable, default) pairs, for ``tickerwire config`` and the README table."""
    out = []
    for f in fields(Config):
        default = "(required)" if f.default is MISSING else str(f.default)
        out.append((PREFIX + f.name.upper(), default))
    return out
