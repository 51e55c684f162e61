"""One frozen configuration object, read from the environment once at start-up.

Every setting is a ``TICKERWIRE_*`` environment variable (the README has the table);
command-line flags of ``tickerwire`` write the same variables before this is read.
A missing required value or an unparsable one fails loudly with :class:`ConfigError`.
"""

from __future__ import annotations

import math
import os
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from .errors import ConfigError

PREFIX = "TICKERWIRE_"


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected a boolean, got {raw!r}")


#: Counts and sizes below one would leave nothing to work with (a pool of no connection, an
#: empty queue, a topic without partitions).
AT_LEAST_ONE = (
    "max_connections", "stream_max_pending", "db_pool_max", "projector_batch_max", "stream_queue_size",
    "stream_max_connections_per_workspace", "max_body_bytes", "topic_posts_partitions", "topic_replication_factor",
    "kafka_session_timeout_ms", "kafka_heartbeat_interval_ms",
)
#: Zero is meaningful for these (an empty pool at rest, no fetch wait, a workspace that may not call).
NOT_NEGATIVE = ("db_pool_min", "kafka_fetch_max_wait_ms", "default_rate_limit_per_minute", "default_daily_quota")


@dataclass(frozen=True, slots=True)
class Config:
    database_url: str = field(repr=False)  # may carry a password
    kafka_bootstrap_servers: str
    #: Streaming replicas of ``database_url``, comma-separated postgresql:// URLs (none: every
    #: statement on the primary). The API's reads go to them (services/common/replicas.py).
    database_read_urls: str = field(default="", repr=False)
    #: A replica further behind the primary than this leaves the API's read rotation (the stream
    #: stops waiting for it at 1.5 times this); it comes back once within a quarter of it.
    replica_max_lag_s: float = 2.0
    topic_prefix: str = "tickerwire"
    host: str = "127.0.0.1"
    api_port: int = 8080
    stream_port: int = 8081
    #: Operator endpoints (/healthz, /readyz, /metrics) have their own listener per process,
    #: bound to ``admin_host`` (localhost by default), never on a partner port.
    admin_host: str = "127.0.0.1"
    api_admin_port: int = 9080
    stream_admin_port: int = 9081
    projector_admin_port: int = 9082
    base_path: str = "/api/v1/developer"
    read_model_schema: str = "rm"
    db_pool_min: int = 2
    db_pool_max: int = 10
    db_statement_timeout_s: float = 1.5
    db_acquire_timeout_s: float = 0.5
    db_connect_timeout_s: float = 2.0
    log_level: str = "INFO"
    kafka_session_timeout_ms: int = 10_000
    kafka_heartbeat_interval_ms: int = 3_000
    kafka_fetch_max_wait_ms: int = 50
    projector_group: str = "tickerwire-projector"
    projector_batch_max: int = 2_000
    sweep_interval_s: float = 3600.0
    projector_log_check_interval_s: float = 10.0
    stream_ping_interval_s: float = 30.0
    #: A WebSocket ping frame this often; a client that has not answered it within half of it
    #: (and sent nothing else) is closed, so a vanished client frees its slot.
    stream_heartbeat_s: float = 60.0
    #: Accept permessage-deflate (RFC 7692) from stream clients that offer it: about 3.4x fewer
    #: bytes per message, for some more CPU and memory per connection (docs/operations.md).
    stream_compress: bool = True
    stream_queue_size: int = 256
    stream_max_pending: int = 50_000
    stream_max_connections_per_workspace: int = 5
    stream_lease_ttl_s: float = 10.0
    stream_lease_renew_s: float = 3.0
    stream_access_recheck_s: float = 1.0
    default_rate_limit_per_minute: int = 60
    default_daily_quota: int = 5_000
    max_body_bytes: int = 16_384
    # Kafka security: one set of settings for every producer, consumer and admin client.
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_ssl_cafile: str = ""
    kafka_ssl_certfile: str = ""
    kafka_ssl_keyfile: str = ""
    kafka_ssl_key_password: str = field(default="", repr=False)
    kafka_ssl_check_hostname: bool = True
    #: Clear Python 3.13's strict X.509 checks (ssl.VERIFY_X509_STRICT, on by default there) for a
    #: private CA whose certificates lack what RFC 5280 asks for (keyUsage on the CA, key identifiers).
    kafka_ssl_relax_x509: bool = False
    kafka_sasl_mechanism: str = "PLAIN"
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = field(default="", repr=False)
    # Topics as code (services/common/topics.py): what `tickerwire topics ensure` creates and
    # what `tickerwire topics check` and the start-up check compare a cluster with.
    topic_posts_partitions: int = 4
    topic_replication_factor: int = 3
    kafka_allow_unsafe_topics: bool = False
    #: Connection hygiene of every listener (deploy/README.md has the file-descriptor budget).
    max_connections: int = 1_000
    http_header_timeout_s: float = 10.0
    http_keepalive_timeout_s: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "Config":
        env = os.environ if env is None else env
        for old, new in RENAMED.items():
            if env.get(old):
                raise ConfigError(f"{old} was renamed to {new} (an admin listener: /healthz, /readyz, /metrics); set that instead")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in overrides:
                values[f.name] = overrides[f.name]
                continue
            var = PREFIX + f.name.upper()
            raw = _value_or_file(env, var)
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
        if self.log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ConfigError(f"TICKERWIRE_LOG_LEVEL={self.log_level!r} is invalid: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        if not self.read_model_schema.isidentifier():
            raise ConfigError("TICKERWIRE_READ_MODEL_SCHEMA must be a plain identifier")
        for name in ("api_port", "stream_port", "api_admin_port", "stream_admin_port", "projector_admin_port"):
            port = getattr(self, name)
            if not 0 <= port < 65536:
                raise ConfigError(f"TICKERWIRE_{name.upper()} out of range: {port}")
        for name in AT_LEAST_ONE:
            if getattr(self, name) < 1:
                raise ConfigError(f"TICKERWIRE_{name.upper()} must be at least 1")
        for name in NOT_NEGATIVE:
            if getattr(self, name) < 0:
                raise ConfigError(f"TICKERWIRE_{name.upper()} must not be negative")
        if self.db_pool_min > self.db_pool_max:
            raise ConfigError(f"TICKERWIRE_DB_POOL_MIN ({self.db_pool_min}) must not exceed TICKERWIRE_DB_POOL_MAX ({self.db_pool_max})")
        if not 0 < self.stream_lease_renew_s < self.stream_lease_ttl_s:
            raise ConfigError(
                "TICKERWIRE_STREAM_LEASE_RENEW_S must be positive and below TICKERWIRE_STREAM_LEASE_TTL_S "
                f"({self.stream_lease_renew_s:g} and {self.stream_lease_ttl_s:g}): a lease must be renewed before it expires"
            )
        # Every duration bounds a wait or paces a loop: zero would spin, infinity would never end.
        for f in fields(self):
            if f.name.endswith("_s") and not 0 < getattr(self, f.name) < math.inf:
                raise ConfigError(f"TICKERWIRE_{f.name.upper()} must be a positive, finite number of seconds")

        self._validate_database_url()
        if self.kafka_security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"TICKERWIRE_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol!r} is invalid: "
                f"expected one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        self._validate_tls()
        self._validate_sasl()
        if self.topic_posts_partitions < 1 or self.topic_replication_factor < 1:
            raise ConfigError("TICKERWIRE_TOPIC_POSTS_PARTITIONS and TICKERWIRE_TOPIC_REPLICATION_FACTOR must be at least 1")

    @property
    def kafka_uses_tls(self) -> bool:
        return self.kafka_security_protocol in ("SSL", "SASL_SSL")

    @property
    def kafka_uses_sasl(self) -> bool:
        return self.kafka_security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def read_urls(self) -> list[str]:
        """The replicas' URLs (``database_read_urls``), in order; empty when none is configured."""
        return [url.strip() for url in self.database_read_urls.split(",") if url.strip()]

    def _validate_database_url(self) -> None:
        """What asyncpg would refuse only at the first connection, refused at start-up instead
        (one line, no retry loop); the URL itself is never echoed (it may hold a password)."""
        _check_url("TICKERWIRE_DATABASE_URL", self.database_url)
        for url in self.read_urls:
            _check_url("TICKERWIRE_DATABASE_READ_URLS", url)

    def _validate_tls(self) -> None:
        files = {"CAFILE": self.kafka_ssl_cafile, "CERTFILE": self.kafka_ssl_certfile, "KEYFILE": self.kafka_ssl_keyfile}
        if not self.kafka_uses_tls:
            if given := [k for k, v in files.items() if v]:
                raise ConfigError(
                    f"TICKERWIRE_KAFKA_SSL_{given[0]} is set but TICKERWIRE_KAFKA_SECURITY_PROTOCOL="
                    f"{self.kafka_security_protocol} does not use TLS (use SSL or SASL_SSL)"
                )
            return
        for key, path in files.items():
            if path and not os.access(path, os.R_OK):
                raise ConfigError(f"TICKERWIRE_KAFKA_SSL_{key}={path!r}: no such readable file")
        if self.kafka_ssl_keyfile and not self.kafka_ssl_certfile:
            raise ConfigError("TICKERWIRE_KAFKA_SSL_KEYFILE is set without TICKERWIRE_KAFKA_SSL_CERTFILE")

    def _validate_sasl(self) -> None:
        if not self.kafka_uses_sasl:
            if self.kafka_sasl_username or self.kafka_sasl_password:
                raise ConfigError(
                    f"SASL credentials are set but TICKERWIRE_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} "
                    "does not use SASL (use SASL_SSL or SASL_PLAINTEXT)"
                )
            return
        if self.kafka_sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"TICKERWIRE_KAFKA_SASL_MECHANISM={self.kafka_sasl_mechanism!r} is invalid: "
                f"expected one of {', '.join(SASL_MECHANISMS)}"
            )
        if not self.kafka_sasl_username or not self.kafka_sasl_password:
            raise ConfigError(
                f"TICKERWIRE_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                "TICKERWIRE_KAFKA_SASL_USERNAME and TICKERWIRE_KAFKA_SASL_PASSWORD (or their _FILE variants)"
            )

    def topic(self, suffix: str) -> str:
        return f"{self.topic_prefix}.{suffix}"


def _check_url(var: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"{var} must be a postgresql:// URL, not {parts.scheme or 'a bare string'!r}")
    for host in filter(None, parts.netloc.rpartition("@")[2].split(",")):
        _, colon, port = (host.rpartition("]")[2] if host.startswith("[") else host).rpartition(":")
        if colon and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(f"{var} has an invalid port {port[:20]!r} (1 to 65535)")


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _value_or_file(env: Mapping[str, str], var: str) -> str | None:
    """``VAR``, or the content of the file named by ``VAR_FILE`` (a mounted secret); not both."""
    path = env.get(var + "_FILE")
    if not path:
        return env.get(var)
    if env.get(var):
        raise ConfigError(f"set either {var} or {var}_FILE, not both")
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{var}_FILE={path!r} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None


#: Where ``tickerwire up`` keeps its logs, embedded data and ``up.json`` (``TICKERWIRE_STATE_DIR``).
STATE_DIR_DEFAULT = ".tickerwire"


def setting(name: str, default: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """One ``TICKERWIRE_<NAME>`` setting of the command line itself, outside :class:`Config` (the
    admin commands' log level, ``up``'s state directory and its database and broker defaults),
    read as every text setting is (``_FILE`` too); ``default`` when unset or empty. Raises
    :class:`ConfigError` as :meth:`Config.from_env` does."""
    return _value_or_file(os.environ if env is None else env, PREFIX + name) or default


#: Settings that were renamed: a deployment still setting the old name is stopped, not ignored.
RENAMED = {"TICKERWIRE_PROJECTOR_PORT": "TICKERWIRE_PROJECTOR_ADMIN_PORT"}

_PARSERS: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "bool": _bool, "str": str}


def describe() -> list[tuple[str, str]]:
    """(variable, default) pairs, for ``tickerwire config`` and the README table."""
    out = []
    for f in fields(Config):
        default = "(required)" if f.default is MISSING else str(f.default)
        out.append((PREFIX + f.name.upper(), default))
    return out
