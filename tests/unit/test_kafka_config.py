"""Kafka security and topic settings: parsing, start-up validation, and what aiokafka is given."""

from __future__ import annotations

import ast
import inspect
import ssl
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    InvalidReplicationFactorError,
    KafkaConnectionError,
    KafkaError,
    NotControllerError,
    TopicAuthorizationFailedError,
)

from tickerwire import services
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka
from tickerwire.services.common.runtime.errors import BrokerUnavailable, ConfigError

BASE = {"TICKERWIRE_DATABASE_URL": "postgresql://x/y", "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": "k:9093"}


def cfg(**env: str) -> FullConfig:
    return FullConfig.from_env({**BASE, **{f"TICKERWIRE_{k}": v for k, v in env.items()}})


@pytest.fixture
def ca_file(tmp_path):
    """A readable CA bundle: the system's, so the TLS context can load it."""
    path = ssl.get_default_verify_paths().cafile or ssl.get_default_verify_paths().openssl_cafile
    if not path:
        pytest.skip("no system CA bundle to load")
    return path


def test_defaults_are_plaintext_without_credentials():
    config = cfg()
    assert config.kafka_security_protocol == "PLAINTEXT"
    assert kafka.security_options(config) == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize(
    "env, message",
    [
        ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "TICKERWIRE_KAFKA_SECURITY_PROTOCOL='TLS' is invalid"),
        (
            {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u"},
            "needs TICKERWIRE_KAFKA_SASL_USERNAME and",
        ),
        ({"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "needs TICKERWIRE_KAFKA_SASL_USERNAME and"),
        (
            {
                "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "KAFKA_SASL_MECHANISM": "GSSAPI",
                "KAFKA_SASL_USERNAME": "u",
                "KAFKA_SASL_PASSWORD": "p",
            },
            "TICKERWIRE_KAFKA_SASL_MECHANISM='GSSAPI' is invalid",
        ),
        (
            {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"},
            "TICKERWIRE_KAFKA_SSL_CAFILE='/nonexistent/ca.pem': no such readable file",
        ),
        ({"KAFKA_SSL_CAFILE": "/etc/hostname"}, "does not use TLS"),
        ({"KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p"}, "does not use SASL"),
        ({"TOPIC_REPLICATION_FACTOR": "0"}, "must be at least 1"),
        ({"KAFKA_ALLOW_UNSAFE_TOPICS": "maybe"}, "TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS='maybe' is invalid"),
    ],
)
def test_invalid_settings_fail_at_start_up_with_a_clear_message(env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg(**env)


def test_key_file_without_certificate_is_refused(ca_file):
    with pytest.raises(ConfigError, match="KEYFILE is set without TICKERWIRE_KAFKA_SSL_CERTFILE"):
        cfg(KAFKA_SECURITY_PROTOCOL="SSL", KAFKA_SSL_KEYFILE=ca_file)


def test_password_comes_from_a_file_and_is_never_in_the_repr(tmp_path):
    secret = tmp_path / "password"
    secret.write_text("s3cr3t-value\n")
    config = cfg(
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
        KAFKA_SASL_MECHANISM="SCRAM-SHA-256",
        KAFKA_SASL_USERNAME="svc",
        KAFKA_SASL_PASSWORD_FILE=str(secret),
    )
    assert config.kafka_sasl_password == "s3cr3t-value"
    assert "s3cr3t" not in repr(config)


def test_value_and_file_together_or_an_unreadable_file_are_refused(tmp_path):
    with pytest.raises(
        ConfigError, match="set either TICKERWIRE_KAFKA_SASL_PASSWORD or TICKERWIRE_KAFKA_SASL_PASSWORD_FILE"
    ):
        cfg(KAFKA_SASL_PASSWORD="a", KAFKA_SASL_PASSWORD_FILE=str(tmp_path / "p"))
    with pytest.raises(ConfigError, match="TICKERWIRE_KAFKA_SASL_PASSWORD_FILE=.* cannot be read"):
        cfg(KAFKA_SASL_PASSWORD_FILE=str(tmp_path / "missing"))


async def test_sasl_ssl_options_reach_every_client_kind(ca_file):
    config = cfg(
        KAFKA_SECURITY_PROTOCOL="SASL_SSL",
        KAFKA_SSL_CAFILE=ca_file,
        KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
        KAFKA_SASL_USERNAME="svc",
        KAFKA_SASL_PASSWORD="pw",
    )
    options = kafka.security_options(config)
    assert options["security_protocol"] == "SASL_SSL"
    assert isinstance(options["ssl_context"], ssl.SSLContext) and options["ssl_context"].check_hostname
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert (options["sasl_mechanism"], options["sasl_plain_username"], options["sasl_plain_password"]) == (
        "SCRAM-SHA-512",
        "svc",
        "pw",
    )
    # Every option is a real constructor argument of each aiokafka client kind ...
    for cls in (AIOKafkaConsumer, AIOKafkaProducer, AIOKafkaAdminClient):
        assert set(options) <= set(inspect.signature(cls.__init__).parameters), cls
    # ... and the factories build them (aiokafka refuses SASL_SSL without an SSL context).
    kafka.consumer(config, group_id=None, client_id="t")
    kafka.producer(config)
    await kafka.admin(config).close()


def test_unloadable_tls_files_are_a_config_error(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    config = cfg(KAFKA_SECURITY_PROTOCOL="SSL", KAFKA_SSL_CAFILE=str(bad))
    with pytest.raises(ConfigError, match="cannot load the Kafka TLS files"):
        kafka.security_options(config)


@pytest.mark.parametrize(
    "error, translated",
    [
        (KafkaConnectionError("down"), BrokerUnavailable),
        (KafkaError("Unable to get cluster metadata over all known brokers"), BrokerUnavailable),
        (NotControllerError, BrokerUnavailable),
        (TopicAuthorizationFailedError, ConfigError),
        (InvalidReplicationFactorError, ConfigError),
    ],
)
def test_broker_errors_are_retried_only_when_a_retry_can_help(error, translated):
    result = kafka.translate_broker_error(error, "cannot create topic t")
    assert type(result) is translated and str(result) == "cannot create topic t"


def constructed(cls: str) -> list[str]:
    """The product's modules (services, devstack, schemas) that construct aiokafka's ``cls``."""
    package = Path(services.__file__).resolve().parents[1]  # the repository root
    builders = []
    for path in sorted(p for part in ("services", "devstack", "schemas") for p in (package / part).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == cls:
                builders.append(path.relative_to(package).as_posix())
    return builders


async def test_every_consumer_the_product_builds_reads_committed_records_only():
    """Records of an aborted transaction are never read: every consumer is built by
    kafka.consumer (no other place constructs one), which sets read_committed and refuses
    another isolation level."""
    assert constructed("AIOKafkaConsumer") == ["services/common/kafka/clients.py"]
    config = cfg()
    for kw in ({}, {"auto_offset_reset": "none", "max_poll_records": 10}):
        built = kafka.consumer(config, "t", group_id=None, client_id="c", **kw)
        assert built._isolation_level == "read_committed"
    with pytest.raises(ValueError):
        kafka.consumer(config, "t", group_id=None, client_id="c", isolation_level="read_uncommitted")


@pytest.mark.parametrize(
    "kw", [{}, {"client_id": "tickerwire-dead-letters"}, {"linger_ms": 0}, {"transactional_id": "t"}]
)
async def test_every_producer_the_product_builds_is_idempotent_with_acks_all(kw):
    """A send retried after a broker or network fault is written once, and acknowledged only
    once every in-sync replica has it: every producer (``tickerwire publish``, the admin
    commands, dead-letter retry, the demo) is built by kafka.producer, which sets both and
    refuses to build one without them."""
    assert constructed("AIOKafkaProducer") == ["services/common/kafka/clients.py"]
    built = kafka.producer(cfg(), **kw)
    assert built._txn_manager is not None  # aiokafka's idempotence: a producer id and sequence numbers
    assert built._sender._acks == -1  # acks=all
    for refused in ({"enable_idempotence": False}, {"acks": 1}, {"acks": 0}):
        with pytest.raises(ValueError, match="idempotent with acks=all"):
            kafka.producer(cfg(), **kw, **refused)
