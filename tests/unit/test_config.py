"""Settings of the listeners: checked at start-up, loudly."""

from __future__ import annotations

import pytest

from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.runtime.config import ConfigError

REQUIRED = {"TICKERWIRE_DATABASE_URL": "postgresql://x/y", "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": "k:9092"}


def test_listener_defaults():
    config = FullConfig.from_env(REQUIRED)
    assert (config.admin_host, config.api_admin_port, config.stream_admin_port, config.projector_admin_port) == (
        "127.0.0.1",
        9080,
        9081,
        9082,
    )
    assert (config.max_connections, config.http_header_timeout_s, config.http_keepalive_timeout_s) == (1000, 10.0, 30.0)


@pytest.mark.parametrize(
    "var,value,word",
    [
        ("TICKERWIRE_API_PORT", "abc", "TICKERWIRE_API_PORT"),
        ("TICKERWIRE_API_ADMIN_PORT", "70000", "TICKERWIRE_API_ADMIN_PORT"),
        ("TICKERWIRE_MAX_CONNECTIONS", "0", "TICKERWIRE_MAX_CONNECTIONS"),
        ("TICKERWIRE_STREAM_MAX_PENDING", "0", "TICKERWIRE_STREAM_MAX_PENDING"),
        ("TICKERWIRE_HTTP_HEADER_TIMEOUT_S", "-1", "TICKERWIRE_HTTP_HEADER_TIMEOUT_S"),
        ("TICKERWIRE_LOG_LEVEL", "loud", "TICKERWIRE_LOG_LEVEL"),
        ("TICKERWIRE_PROJECTOR_PORT", "8082", "TICKERWIRE_PROJECTOR_ADMIN_PORT"),
    ],
)
def test_bad_listener_settings_stop_the_process_with_one_clear_message(var, value, word):
    with pytest.raises(ConfigError) as exc:
        FullConfig.from_env({**REQUIRED, var: value})
    assert word in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "var,value",
    [
        ("TICKERWIRE_STREAM_PING_INTERVAL_S", "0"),  # would broadcast pings in a tight loop
        ("TICKERWIRE_SWEEP_INTERVAL_S", "0"),
        ("TICKERWIRE_DB_STATEMENT_TIMEOUT_S", "inf"),  # no bound at all
        ("TICKERWIRE_DB_ACQUIRE_TIMEOUT_S", "nan"),
        ("TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S", "-5"),
        ("TICKERWIRE_STREAM_QUEUE_SIZE", "0"),
        ("TICKERWIRE_DB_POOL_MAX", "0"),
        ("TICKERWIRE_PROJECTOR_BATCH_MAX", "0"),
        ("TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS", "-1"),
        ("TICKERWIRE_DEFAULT_DAILY_QUOTA", "-1"),
    ],
)
def test_every_duration_and_size_is_checked_at_start_up(var, value):
    with pytest.raises(ConfigError) as exc:
        FullConfig.from_env({**REQUIRED, var: value})
    assert var in str(exc.value) and "\n" not in str(exc.value)


def test_a_pool_whose_minimum_exceeds_its_maximum_is_refused():
    with pytest.raises(ConfigError, match="TICKERWIRE_DB_POOL_MIN"):
        FullConfig.from_env({**REQUIRED, "TICKERWIRE_DB_POOL_MIN": "8", "TICKERWIRE_DB_POOL_MAX": "4"})
    assert (
        FullConfig.from_env(
            {**REQUIRED, "TICKERWIRE_DB_POOL_MIN": "0", "TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS": "0"}
        ).db_pool_min
        == 0
    )


def test_stream_lease_and_watchdog_settings():
    config = FullConfig.from_env(
        {
            **REQUIRED,
            "TICKERWIRE_STREAM_LEASE_TTL_S": "20",
            "TICKERWIRE_STREAM_LEASE_RENEW_S": "5",
            "TICKERWIRE_STREAM_ACCESS_RECHECK_S": "0.5",
        }
    )
    assert (config.stream_lease_ttl_s, config.stream_lease_renew_s, config.stream_access_recheck_s) == (20.0, 5.0, 0.5)
    defaults = FullConfig.from_env(REQUIRED)
    assert (defaults.stream_lease_ttl_s, defaults.stream_lease_renew_s, defaults.stream_access_recheck_s) == (
        10.0,
        3.0,
        1.0,
    )


@pytest.mark.parametrize(
    "env,word",
    [
        ({"TICKERWIRE_STREAM_LEASE_RENEW_S": "10"}, "TICKERWIRE_STREAM_LEASE_RENEW_S"),  # not renewed before it expires
        ({"TICKERWIRE_STREAM_LEASE_TTL_S": "2"}, "TICKERWIRE_STREAM_LEASE_TTL_S"),
        ({"TICKERWIRE_STREAM_LEASE_RENEW_S": "0"}, "TICKERWIRE_STREAM_LEASE_RENEW_S"),
        ({"TICKERWIRE_STREAM_ACCESS_RECHECK_S": "0"}, "TICKERWIRE_STREAM_ACCESS_RECHECK_S"),
    ],
)
def test_a_lease_that_would_expire_before_its_renewal_is_refused(env, word):
    with pytest.raises(ConfigError) as exc:
        FullConfig.from_env({**REQUIRED, **env})
    assert word in str(exc.value) and "\n" not in str(exc.value)


def test_command_line_settings_are_read_like_every_text_setting(tmp_path):
    from tickerwire.services.common.runtime.config import setting

    secret = tmp_path / "dsn"
    secret.write_text("postgresql://from/file\n")
    assert setting("DATABASE_URL", env={"TICKERWIRE_DATABASE_URL_FILE": str(secret)}) == "postgresql://from/file"
    assert setting("STATE_DIR", ".tickerwire", env={}) == ".tickerwire"
    assert setting("STATE_DIR", ".tickerwire", env={"TICKERWIRE_STATE_DIR": "/srv/tw"}) == "/srv/tw"
    with pytest.raises(ConfigError):
        setting("DATABASE_URL", env={"TICKERWIRE_DATABASE_URL": "x", "TICKERWIRE_DATABASE_URL_FILE": str(secret)})


@pytest.mark.parametrize(
    ("url", "word"),
    [
        ("mysql://u:pw@h/db", "postgresql://"),
        ("localhost:5432/db", "postgresql://"),
        ("postgresql://u:pw@h:http/db", "invalid port"),
        ("postgresql://u@h:0/db", "invalid port"),
        ("postgresql://u@h:70000/db", "invalid port"),
        ("postgresql://u@a:5432,b:x/db", "invalid port"),
    ],
)
def test_a_database_url_no_connection_could_use_is_refused_at_start_up_without_echoing_it(url, word):
    with pytest.raises(ConfigError) as caught:
        FullConfig.from_env({**REQUIRED, "TICKERWIRE_DATABASE_URL": url})
    assert word in str(caught.value) and "pw" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw@h/db",
        "postgres://h:5432/db",
        "postgresql:///db?host=/run/postgresql",
        "postgresql://u@[::1]:5432,b:6432/db",
    ],
)
def test_database_urls_asyncpg_accepts_pass(url):
    assert FullConfig.from_env({**REQUIRED, "TICKERWIRE_DATABASE_URL": url}).database_url == url


def test_a_direct_url_makes_the_main_url_a_pooler_and_takes_what_must_bypass_it():
    plain = FullConfig.from_env({**REQUIRED, "TICKERWIRE_DATABASE_URL": "postgresql://u@pg/db"})
    assert (plain.pooled, plain.direct_url) == (False, "postgresql://u@pg/db")  # unset: nothing changes
    pooled = FullConfig.from_env(
        {
            **REQUIRED,
            "TICKERWIRE_DATABASE_URL": "postgresql://u@pgbouncer:6432/db",
            "TICKERWIRE_DATABASE_DIRECT_URL": "postgresql://u:pw@pg:5432/db",
        }
    )
    assert (pooled.pooled, pooled.direct_url) == (True, "postgresql://u:pw@pg:5432/db")
    assert "pw" not in repr(pooled)
    with pytest.raises(ConfigError, match="TICKERWIRE_DATABASE_DIRECT_URL must be a postgresql:// URL"):
        FullConfig.from_env({**REQUIRED, "TICKERWIRE_DATABASE_DIRECT_URL": "mysql://pg/db"})


def test_the_configuration_repr_shows_no_password():
    config = FullConfig.from_env(
        {
            **REQUIRED,
            "TICKERWIRE_DATABASE_URL": "postgresql://svc:s3cret-pw@db:5432/tw",
            "TICKERWIRE_KAFKA_SASL_PASSWORD": "kafka-pw",
            "TICKERWIRE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "TICKERWIRE_KAFKA_SASL_MECHANISM": "PLAIN",
            "TICKERWIRE_KAFKA_SASL_USERNAME": "svc",
        }
    )
    assert "s3cret-pw" not in repr(config) and "kafka-pw" not in repr(config)
    assert config.database_url == "postgresql://svc:s3cret-pw@db:5432/tw"


def test_every_setting_can_come_from_a_file(tmp_path):
    (tmp_path / "pool").write_text("7\n")
    (tmp_path / "hostname").write_text("false\n")
    config = FullConfig.from_env(
        {
            **REQUIRED,
            "TICKERWIRE_DB_POOL_MAX_FILE": str(tmp_path / "pool"),
            "TICKERWIRE_KAFKA_SSL_CHECK_HOSTNAME_FILE": str(tmp_path / "hostname"),
        }
    )
    assert (config.db_pool_max, config.kafka_ssl_check_hostname) == (7, False)
    with pytest.raises(ConfigError, match="not both"):
        FullConfig.from_env(
            {**REQUIRED, "TICKERWIRE_DB_POOL_MAX": "7", "TICKERWIRE_DB_POOL_MAX_FILE": str(tmp_path / "pool")}
        )


def test_configuration_md_is_what_tickerwire_config_markdown_prints():
    """docs/configuration.md is generated from every service's settings; a setting added, removed
    or given another default without regenerating it fails here
    (`tickerwire config --markdown > docs/configuration.md`)."""
    from pathlib import Path

    from tickerwire.services.cli.settings import configuration_markdown

    doc = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert doc.read_text() == configuration_markdown(), (
        "regenerate: tickerwire config --markdown > docs/configuration.md"
    )


def test_every_setting_says_what_it_does():
    from dataclasses import fields

    assert [f.name for f in fields(FullConfig) if not f.metadata.get("meaning")] == []


def test_each_service_reads_its_own_section_and_the_shared_one_only():
    """The stream never reads the projector's settings (nor the API's), and so on: a service's
    configuration type has the shared contract and its own section, which no other has."""
    from dataclasses import fields

    from tickerwire.services.api.settings import ApiConfig
    from tickerwire.services.projector.settings import ProjectorConfig
    from tickerwire.services.readmodel.endpoint_settings import EndpointSettings
    from tickerwire.services.stream.settings import StreamConfig
    from tickerwire.services.webhooks.settings import WebhooksConfig

    # The settings of endpoint changes (services/readmodel) are shared by the two services that make them.
    assert [
        c for c in (ApiConfig, StreamConfig, ProjectorConfig, WebhooksConfig) if issubclass(c, EndpointSettings)
    ] == [
        ApiConfig,
        WebhooksConfig,
    ]
    shared = {f.name for f in fields(EndpointSettings)}
    sections = (ApiConfig, StreamConfig, ProjectorConfig, WebhooksConfig)
    own = {c: {f.name for f in fields(c)} - shared for c in sections}
    assert all(own.values())
    for i, a in enumerate(sections):
        for b in sections[i + 1 :]:
            assert not own[a] & own[b], (a, b)
    assert shared | set().union(*own.values()) == {f.name for f in fields(FullConfig)}
    assert {n.split("_")[0] for n in own[StreamConfig]} == {"stream"}
    assert {n.split("_")[0] for n in own[WebhooksConfig]} == {"webhooks"}
    assert {n.split("_")[0] for n in own[ProjectorConfig]} <= {"projector", "sweep"}


def test_a_shared_setting_keeps_the_variable_it_had():
    """The log check's pace is shared by the projector and the stream; its variable is still
    TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S."""
    config = FullConfig.from_env({**REQUIRED, "TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S": "2"})
    assert config.log_check_interval_s == 2.0


def test_the_webhook_settings_fail_loudly():
    with pytest.raises(ConfigError, match="LEASE_TTL_S must be at least twice"):
        FullConfig.from_env({**REQUIRED, "TICKERWIRE_WEBHOOKS_LEASE_TTL_S": "10"})
    with pytest.raises(ConfigError, match="SIGNING_KEY: the webhook signing key must be at least 32 bytes"):
        FullConfig.from_env({**REQUIRED, "TICKERWIRE_WEBHOOKS_SIGNING_KEY": "c2hvcnQ="})
    with pytest.raises(ConfigError, match="is not set: generate one"):
        FullConfig.from_env(REQUIRED).signing_key()
