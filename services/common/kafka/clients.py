"""Building the Kafka clients: every producer, consumer and admin client is made here, so the
security settings (TLS, SASL) apply to all of them, every producer is idempotent with
``acks=all`` (:data:`PRODUCER_GUARANTEES`), and every consumer reads committed records only
(``read_committed``). A client that cannot bootstrap says why (:func:`unreachable`): a
refusal no retry fixes (credentials, certificates) is a ConfigError, an outage is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from typing import Any, AsyncIterator, Awaitable, Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.helpers import create_ssl_context

from ..runtime.config import Config
from ..runtime.errors import BrokerUnavailable, ConfigError
from ..runtime.supervise import stray

log = logging.getLogger(__name__)


class _BootstrapCause(logging.Filter):
    """aiokafka logs why each bootstrap attempt failed ('Unable connect to "host:port": <error>',
    at ERROR on its ``aiokafka`` logger) and then raises a ``KafkaConnectionError`` that does not
    say. This filter, on that logger, keeps the latest such error, so the error raised here can
    name it and a refusal that no retry fixes (credentials, certificates) is not retried as an
    outage. It drops nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.last: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            isinstance(record.msg, str)
            and record.msg.startswith("Unable connect to")
            and isinstance(record.args, tuple)
            and record.args
        ):
            if isinstance(cause := record.args[-1], BaseException):
                self.last = cause
        return True

    def take(self) -> BaseException | None:
        cause, self.last = self.last, None
        return cause


BOOTSTRAP_CAUSE = _BootstrapCause()
logging.getLogger("aiokafka").addFilter(BOOTSTRAP_CAUSE)


def quiet_client_logs() -> None:
    """For a command: aiokafka logs each failed connection attempt, and the command's own line
    says it once, with the cause of the last attempt. So aiokafka's ERROR records are still
    made (:data:`BOOTSTRAP_CAUSE` reads them) but no handler writes them."""
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    for handler in logging.root.handlers:
        handler.addFilter(lambda record: not record.name.startswith("aiokafka"))


#: What a broker answers when it refuses this client for good: retrying changes nothing.
_REFUSED = (SaslAuthenticationFailed, UnsupportedSaslMechanismError, IllegalSaslStateError, ssl.SSLError)


def unreachable(config: Config, exc: BaseException, what: str = "cannot reach the broker at") -> Exception:
    """The error for a client that could not bootstrap: a ConfigError naming the cause when the
    broker refused our credentials or TLS (not retried), else BrokerUnavailable (retried)."""
    cause = BOOTSTRAP_CAUSE.take()
    if isinstance(cause, _REFUSED):
        return ConfigError(
            f"the broker at {config.kafka_bootstrap_servers} refused this client: {type(cause).__name__}: {cause} "
            "(check TICKERWIRE_KAFKA_SECURITY_PROTOCOL and the TICKERWIRE_KAFKA_SSL_* / TICKERWIRE_KAFKA_SASL_* settings)"
            + _strict_x509_hint(cause, config)
        )
    because = f" (last attempt: {type(cause).__name__}: {cause})" if cause is not None else ""
    return BrokerUnavailable(f"{what} {config.kafka_bootstrap_servers}: {exc}{because}")


#: What OpenSSL says of a certificate that only strict X.509 checking refuses (Python 3.13+).
_STRICT_X509_REFUSALS = ("key usage", "key identifier", "basic constraints")


def _strict_x509_hint(cause: BaseException, config: Config) -> str:
    """The way out for a certificate refused by Python 3.13's strict X.509 checks, else ''."""
    message = str(getattr(cause, "verify_message", "") or "").lower()
    if config.kafka_ssl_relax_x509 or not any(s in message for s in _STRICT_X509_REFUSALS):
        return ""
    return (
        "; this Python checks X.509 strictly (3.13+): reissue the CA with keyUsage and key identifiers, "
        "or set TICKERWIRE_KAFKA_SSL_RELAX_X509=true"
    )


@functools.lru_cache(maxsize=8)
def _ssl_context(
    cafile: str, certfile: str, keyfile: str, key_password: str, check_hostname: bool, relax_x509: bool = False
) -> ssl.SSLContext:
    try:
        context = create_ssl_context(
            cafile=cafile or None, certfile=certfile or None, keyfile=keyfile or None, password=key_password or None
        )
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the Kafka TLS files (TICKERWIRE_KAFKA_SSL_*): {exc}") from None
    context.check_hostname = check_hostname
    if relax_x509:  # Python 3.13+ sets it in every default context; earlier ones never do
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def security_options(config: Config) -> dict[str, Any]:
    """The keyword arguments that make an aiokafka client use the configured TLS and SASL."""
    options: dict[str, Any] = {"security_protocol": config.kafka_security_protocol}
    if config.kafka_uses_tls:
        options["ssl_context"] = _ssl_context(
            config.kafka_ssl_cafile,
            config.kafka_ssl_certfile,
            config.kafka_ssl_keyfile,
            config.kafka_ssl_key_password,
            config.kafka_ssl_check_hostname,
            config.kafka_ssl_relax_x509,
        )
    if config.kafka_uses_sasl:
        # aiokafka takes SCRAM credentials through the same two arguments as PLAIN.
        options.update(
            sasl_mechanism=config.kafka_sasl_mechanism,
            sasl_plain_username=config.kafka_sasl_username,
            sasl_plain_password=config.kafka_sasl_password,
        )
    return options


#: Every consumer the product builds reads only committed records: transactional producers
#: (Kafka Streams, Flink, Debezium in exactly-once mode) abort transactions, and an aborted
#: record must never be served. Its positions and lag are measured against the last stable
#: offset (:func:`.reading.log_end`).
ISOLATION_LEVEL = "read_committed"


def consumer(config: Config, *topics: str, group_id: str | None, client_id: str, **kw) -> AIOKafkaConsumer:
    if kw.get("isolation_level", ISOLATION_LEVEL) != ISOLATION_LEVEL:
        raise ValueError("every consumer reads committed records only")
    params = dict(
        bootstrap_servers=config.kafka_bootstrap_servers,
        client_id=client_id,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=config.kafka_session_timeout_ms,
        heartbeat_interval_ms=config.kafka_heartbeat_interval_ms,
        fetch_max_wait_ms=config.kafka_fetch_max_wait_ms,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        isolation_level=ISOLATION_LEVEL,
        **security_options(config),
    )
    params.update(kw)
    return AIOKafkaConsumer(*topics, **params)


#: Every producer the product builds (``tickerwire publish``, the admin commands, dead-letter
#: retry, the demo) is idempotent and waits for every in-sync replica, the settings
#: docs/publishing.md recommends to platform teams: a send retried after a broker or network
#: fault is written once, and an acknowledged record survives the loss of its leader.
PRODUCER_GUARANTEES: dict[str, Any] = {"enable_idempotence": True, "acks": "all"}


def producer(config: Config, client_id: str = "tickerwire-publisher", **kw) -> AIOKafkaProducer:
    if any(kw.get(name, value) != value for name, value in PRODUCER_GUARANTEES.items()):
        raise ValueError("every producer is idempotent with acks=all")
    params = dict(
        bootstrap_servers=config.kafka_bootstrap_servers,
        client_id=client_id,
        linger_ms=5,
        max_batch_size=256 * 1024,
        compression_type=None,
        **PRODUCER_GUARANTEES,
        **security_options(config),
    )
    params.update(kw)
    return AIOKafkaProducer(**params)


def admin(config: Config, client_id: str = "tickerwire-admin") -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(
        bootstrap_servers=config.kafka_bootstrap_servers, client_id=client_id, **security_options(config)
    )


@contextlib.asynccontextmanager
async def _running(
    config: Config,
    start: Callable[[], Awaitable[object]],
    stop: Callable[[], Awaitable[object]],
    fails: type[Exception],
) -> AsyncIterator[None]:
    """A client started, and stopped on the way out; one that cannot bootstrap (``fails``) is
    stopped at once and raised as :func:`unreachable` says."""
    try:
        await start()
    except fails as exc:
        await stop()
        raise unreachable(config, exc) from exc
    try:
        yield
    finally:
        await stop()


@contextlib.asynccontextmanager
async def started_producer(config: Config, **kw) -> AsyncIterator[AIOKafkaProducer]:
    prod = producer(config, **kw)
    async with _running(config, prod.start, prod.stop, KafkaConnectionError):
        yield prod


def translate_broker_error(error: BaseException | type[BaseException], detail: str) -> Exception:
    """A broker error (an exception, or the class of an error code), translated at the seam:
    transient ones become BrokerUnavailable (retried with backoff); the others (authorization,
    an invalid topic setting) are configuration problems that no retry fixes."""
    kind = error if isinstance(error, type) else type(error)
    transient = (
        kind is KafkaError  # aiokafka's generic "no metadata from any broker"
        or issubclass(kind, (KafkaConnectionError, KafkaTimeoutError, asyncio.TimeoutError))
        or getattr(kind, "retriable", False)
    )
    return BrokerUnavailable(detail) if transient else ConfigError(detail)


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()`` for a loop that goes on with a new consumer. aiokafka's stop cancels
    the fetch requests in flight and awaits them without suppressing their ``CancelledError``
    (aio-libs/aiokafka#647), so after a broker outage of some seconds the caller, which nobody
    asked to stop, got a ``CancelledError``: the projector's and the stream's loops ended there
    for good. That one is absorbed (logged at WARNING); a stop asked of the caller still raises."""
    try:
        await consumer.stop()
    except asyncio.CancelledError as exc:
        if not stray(exc):
            raise
        log.warning("the Kafka consumer's stop raised its own CancelledError (aiokafka#647); going on")


@contextlib.asynccontextmanager
async def started_admin(config: Config) -> AsyncIterator[AIOKafkaAdminClient]:
    client = admin(config)
    async with _running(config, client.start, client.close, KafkaError):
        yield client
