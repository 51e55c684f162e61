"""Kafka client construction and topic administration, shared by the services and the CLI.

Every producer, consumer and admin client is built here, so the security settings
(TLS, SASL) apply to all of them, and every consumer reads committed records only
(``read_committed``): a post a producer published in a transaction it then aborted is never
projected nor pushed. Our own producers use no idempotence nor transactions (exactly-once
effect comes from positions stored with the rows in PostgreSQL); other producers may.

A record batch that cannot be decoded (a compression codec we cannot decode, a corrupt batch)
is the record's own fault, not the broker's: :func:`fetch` isolates it to its partition and
offset, so the caller sets it aside and every other partition goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import struct
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    CorruptRecordException,
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    SaslAuthenticationFailed,
    TopicAlreadyExistsError,
    UnsupportedCodecError,
    UnsupportedSaslMechanismError,
    for_code,
)
from aiokafka.helpers import create_ssl_context

from ..runtime.config import Config
from ..runtime.errors import BrokerUnavailable, ConfigError
from ..runtime.supervise import stray
from .declaration import Difference, TopicState, compare, declared_topics

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
#: offset (:func:`log_end`).
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


async def partitions_of(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    """The partitions of ``topic`` as the cluster says now (empty while it does not exist).

    Asked of the broker, not of the consumer's cached metadata: a consumer without a group
    caches only the topics it was assigned, and its bootstrap asks for no topic at all on
    Apache Kafka (an empty Metadata request of v1+ means "none"; Tansu answers with every
    topic), so ``partitions_for_topic`` of a topic never assigned stays None there."""
    cluster = await consumer._client.fetch_all_metadata()
    return set(cluster.partitions_for_topic(topic) or ())


def log_end(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """Where ``tp``'s readable log ends for this consumer, from its last fetch: the last stable
    offset (no record of an open transaction is readable past it), or the high watermark from
    a broker that reports no last stable offset; None before the first fetch."""
    lso = consumer.last_stable_offset(tp)
    if lso is not None and lso >= 0:
        return lso
    return consumer.highwater(tp)


# ------------------------------------------------------------------ undecodable batches

#: Dead-letter reason kinds of a record that could not be decoded at all.
CODEC = "codec"
CORRUPT_BATCH = "corrupt_batch"
#: Where aiokafka decodes fetched batches (its pure-Python and compiled record readers, the codecs).
_DECODING_CODE = ("aiokafka/record/", "aiokafka\\record\\", "aiokafka/codec", "aiokafka\\codec", "cramjam")


def decode_fault(exc: BaseException) -> tuple[str, str] | None:
    """The dead-letter kind and reason when ``exc`` was raised decoding a fetched batch (the
    record's own fault: retrying reads the same bytes again), else None (a broker or network
    fault, retried)."""
    if isinstance(exc, UnsupportedCodecError):
        return CODEC, f"the record batch's compression codec cannot be decoded here: {exc}"
    if isinstance(exc, CorruptRecordException):
        return CORRUPT_BATCH, f"corrupt record batch: {exc}"
    if isinstance(exc, (KafkaError, asyncio.CancelledError)) or not isinstance(exc, Exception):
        return None
    tb = exc.__traceback__
    while tb is not None:
        if any(part in tb.tb_frame.f_code.co_filename for part in _DECODING_CODE):
            return CORRUPT_BATCH, f"the record batch cannot be decoded: {type(exc).__name__}: {exc}"
        tb = tb.tb_next
    return None


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A record the consumer could not decode: the first offset of its batch not read yet."""

    tp: TopicPartition
    offset: int
    kind: str
    reason: str


#: How long :func:`fetch` waits for the partitions' records again while isolating a bad batch.
ISOLATE_S = 2.0


async def fetch(
    consumer: AIOKafkaConsumer,
    rewind: Callable[[list[TopicPartition]], Awaitable[object]],
    *partitions: TopicPartition,
    timeout_ms: int,
    max_records: int | None = None,
) -> tuple[dict[TopicPartition, list[ConsumerRecord]], Undecodable | None]:
    """``consumer.getmany(*partitions)`` that a batch it cannot decode does not stop.

    aiokafka raises a decode error out of ``getmany`` for all partitions at once, and drops
    what it had already taken from the others. Then ``rewind`` seeks the given partitions back
    to the caller's next unread offset, the partitions are read one at a time to find the one
    that fails, and that one record by record to the offset that fails. Returns the records
    read and that offset (None when nothing failed); the caller sets the offset aside and seeks
    past it. A record of a bad batch fails alone: the next one of its batch is found by the
    next call."""
    try:
        return await consumer.getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records), None
    except Exception as exc:
        if decode_fault(exc) is None:
            raise
        log.warning("a fetched record batch cannot be decoded (%s: %s); finding its partition", type(exc).__name__, exc)
    paused = consumer.paused()
    tps = sorted(tp for tp in (partitions or consumer.assignment()) if tp not in paused)
    await rewind(tps)  # a seek drops what aiokafka had fetched, taken or not
    got: dict[TopicPartition, list[ConsumerRecord]] = {}
    deadline = asyncio.get_running_loop().time() + ISOLATE_S
    while asyncio.get_running_loop().time() < deadline:
        for tp in tps:
            try:
                records = (await consumer.getmany(tp, timeout_ms=0, max_records=max_records)).get(tp)
            except Exception as exc:
                if decode_fault(exc) is None:
                    raise
                if got.get(tp):
                    consumer.seek(tp, got[tp][-1].offset + 1)
                else:
                    await rewind([tp])
                more, bad = await _isolate(consumer, tp, max_records or 500)
                got.setdefault(tp, []).extend(more)
                return got, bad
            if records:
                got.setdefault(tp, []).extend(records)
        await asyncio.sleep(0.05)
    return got, None  # fetched again, and decoded this time


async def _isolate(
    consumer: AIOKafkaConsumer, tp: TopicPartition, most: int
) -> tuple[list[ConsumerRecord], Undecodable | None]:
    """Read ``tp`` one record at a time to the one that cannot be decoded (at most ``most``
    records: the next call goes on from there)."""
    records: list[ConsumerRecord] = []
    while len(records) < most:
        try:
            async with asyncio.timeout(ISOLATE_S):
                records.append(await consumer.getone(tp))
        except TimeoutError:
            return records, None
        except Exception as exc:
            if (fault := decode_fault(exc)) is None:
                raise
            offset = await consumer.position(tp)
            consumer.seek(tp, offset)  # drops the failed batch
            return records, Undecodable(tp, offset, *fault)
    return records, None


def producer(config: Config, client_id: str = "tickerwire-publisher", **kw) -> AIOKafkaProducer:
    params = dict(
        bootstrap_servers=config.kafka_bootstrap_servers,
        client_id=client_id,
        acks="all",
        linger_ms=5,
        max_batch_size=256 * 1024,
        compression_type=None,
        **security_options(config),
    )
    params.update(kw)
    return AIOKafkaProducer(**params)


def admin(config: Config, client_id: str = "tickerwire-admin") -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(
        bootstrap_servers=config.kafka_bootstrap_servers, client_id=client_id, **security_options(config)
    )


@contextlib.asynccontextmanager
async def started_producer(config: Config, **kw) -> AsyncIterator[AIOKafkaProducer]:
    prod = producer(config, **kw)
    try:
        await prod.start()
    except KafkaConnectionError as exc:
        await prod.stop()
        raise unreachable(config, exc) from exc
    try:
        yield prod
    finally:
        await prod.stop()


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
    try:
        await client.start()
    except KafkaError as exc:
        await client.close()
        raise unreachable(config, exc) from exc
    try:
        yield client
    finally:
        await client.close()


async def ensure_declared_before(config: Config, what: str) -> None:
    """Create the missing declared topics before a command reads or writes them: otherwise its
    first request would have the broker create them on demand (Apache Kafka's default
    ``auto.create.topics.enable``, and Tansu) with the broker's settings, a delete policy and
    its default partitions, which a rebuild cannot use and a partition count cannot undo."""
    for name in await ensure_topics(config):
        log.warning("created topic %s as declared before %s: it did not exist (a new or emptied broker?)", name, what)


async def ensure_topics(config: Config) -> list[str]:
    """Create the missing declared topics with their partitions, replication factor and
    configuration; returns those created. Existing topics are left as they are (see check_topics)."""
    created = []
    async with started_admin(config) as client:
        try:
            existing = set(await client.list_topics())
        except KafkaError as exc:
            raise translate_broker_error(
                exc, f"cannot list topics at {config.kafka_bootstrap_servers}: {exc!r}"
            ) from exc
        for decl in declared_topics(config):
            if decl.name in existing:
                continue
            try:
                response = await client.create_topics(
                    [NewTopic(decl.name, decl.partitions, decl.replication_factor, topic_configs=dict(decl.configs))]
                )
            except TopicAlreadyExistsError:
                continue
            except KafkaError as exc:
                raise translate_broker_error(exc, f"cannot create topic {decl.name}: {exc!r}") from exc
            codes = [(code, message) for _, code, message in _topic_errors(response) if code]
            for code, message in codes:
                error = for_code(code)
                if error is TopicAlreadyExistsError:  # another process won the race
                    break
                # e.g. InvalidReplicationFactorError: more replicas than brokers.
                raise translate_broker_error(
                    error, f"cannot create topic {decl.name}: {error.__name__} {message or ''}".rstrip()
                )
            else:
                created.append(decl.name)
        await _until_listed(client, created, config)
    for name in created:
        log.info("created topic %s", name)
    return created


#: How long a created topic may take to appear in the cluster's metadata.
CREATED_VISIBLE_S = 15.0


async def _until_listed(client: AIOKafkaAdminClient, names: list[str], config: Config) -> None:
    """Wait until the topics just created are in the cluster's metadata: Apache Kafka answers
    CreateTopics before every broker's metadata has them, so a check (or a consumer) asking at
    once would find them missing."""
    deadline = asyncio.get_running_loop().time() + CREATED_VISIBLE_S
    while names and not set(names) <= set(await client.list_topics()):
        if asyncio.get_running_loop().time() > deadline:
            raise BrokerUnavailable(
                f"topics {', '.join(names)} were created at {config.kafka_bootstrap_servers} but are not in its "
                f"metadata after {CREATED_VISIBLE_S:g} s"
            )
        await asyncio.sleep(0.1)


def _topic_errors(response) -> list[tuple[str, int, str | None]]:
    return [(t[0], t[1], t[2] if len(t) > 2 else None) for t in response.topic_errors]


async def cluster_topics(config: Config) -> dict[str, TopicState]:
    """Partitions, replication factor and configuration of the declared topics that exist."""
    names = [d.name for d in declared_topics(config)]
    async with started_admin(config) as client:
        try:
            existing = [n for n in names if n in set(await client.list_topics())]
            if not existing:
                return {}
            metadata = await client.describe_topics(existing)
            responses = await client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in existing])
        except KafkaError as exc:
            raise translate_broker_error(
                exc, f"cannot describe topics at {config.kafka_bootstrap_servers}: {exc!r}"
            ) from exc
    configs: dict[str, dict[str, str]] = {}
    for response in responses:
        for error_code, error_message, _type, name, entries in response.resources:
            if error_code:
                error = for_code(error_code)
                raise translate_broker_error(
                    error, f"cannot read the configuration of {name}: {error.__name__} {error_message or ''}".rstrip()
                )
            configs[name] = {entry[0]: entry[1] for entry in entries if entry[1] is not None}
    states = {}
    for topic in metadata:
        partitions = topic["partitions"]
        rf = min((len(p["replicas"]) for p in partitions), default=0)
        states[topic["topic"]] = TopicState(topic["topic"], len(partitions), rf, configs.get(topic["topic"], {}))
    return states


async def check_topics(config: Config) -> list[Difference]:
    """How the cluster's topics differ from the declaration (empty when they match)."""
    return compare(declared_topics(config), await cluster_topics(config))


#: ApiVersions v0 (API key 18, no body), which every Kafka broker answers before any
#: authentication: a request of the protocol, not just an open socket. The kernel accepts TCP
#: connections for a broker process that is frozen or wedged; only an answer shows it works.
_PROBE_CORRELATION = 0x7477  # "tw"
_PROBE_CLIENT = b"tickerwire-readiness"
_PROBE_BODY = struct.pack(">hhih", 18, 0, _PROBE_CORRELATION, len(_PROBE_CLIENT)) + _PROBE_CLIENT
_PROBE_REQUEST = struct.pack(">i", len(_PROBE_BODY)) + _PROBE_BODY


async def _broker_answers(host: str, port: int, context: ssl.SSLContext | None) -> bool:
    """Whether the broker at host:port answers an ApiVersions request (unbounded: the caller bounds it)."""
    reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None)
    try:
        writer.write(_PROBE_REQUEST)
        await writer.drain()
        size, correlation = struct.unpack(">ii", await reader.readexactly(8))
        return size >= 4 and correlation == _PROBE_CORRELATION
    finally:
        writer.transport.abort()  # a probe: no orderly close to wait for (the peer may be frozen)


async def broker_check(config: Config, timeout_s: float = 0.8) -> tuple[bool, str]:
    """Readiness: some bootstrap server answers a Kafka request within ``timeout_s`` (all are
    asked at once, over TLS when configured)."""
    context = security_options(config).get("ssl_context")
    servers = []
    for server in config.kafka_bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        with contextlib.suppress(ValueError):
            servers.append((host.strip("[]") or "127.0.0.1", int(port)))
    probes = [asyncio.ensure_future(_broker_answers(host, port, context)) for host, port in servers]
    try:
        async with asyncio.timeout(timeout_s):
            for answered in asyncio.as_completed(probes):
                with contextlib.suppress(OSError, EOFError):  # refused, reset, TLS failure: the next one
                    if await answered:
                        return True, "ok"
    except TimeoutError:  # some server accepted the connection and said nothing
        return False, (
            f"broker at {config.kafka_bootstrap_servers} does not answer a Kafka request "
            f"within {timeout_s:g}s (accepts connections but is frozen, overloaded or not Kafka)"
        )
    finally:
        for probe in probes:
            probe.cancel()
    return False, f"broker unreachable at {config.kafka_bootstrap_servers}"
