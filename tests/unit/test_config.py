"""Settings of the listeners: checked at start-up, loudly."""

from __future__ import annotations

import pytest

from tickerwire.services.common.config import Config, ConfigError

REQUIRED = {"TICKERWIRE_DATABASE_URL": "postgresql://x/y", "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": "k:9092"}


def test_listener_defaults():
    config = Config.from_env(REQUIRED)
    assert (config.admin_host, config.api_admin_port, config.stream_admin_port, config.projector_admin_port) == (
        "127.0.0.1", 9080, 9081, 9082)
    assert (config.max_connections, config.http_header_timeout_s, config.http_keepalive_timeout_s) == (1000, 10.0, 30.0)


@pytest.mark.parametrize("var,value,word", [
    ("TICKERWIRE_API_PORT", "abc", "TICKERWIRE_API_PORT"),
    ("TICKERWIRE_API_ADMIN_PORT", "70000", "TICKERWIRE_API_ADMIN_PORT"),
    ("TICKERWIRE_MAX_CONNECTIONS", "0", "TICKERWIRE_MAX_CONNECTIONS"),
    ("TICKERWIRE_HTTP_HEADER_TIMEOUT_S", "-1", "TICKERWIRE_HTTP_HEADER_TIMEOUT_S"),
    ("TICKERWIRE_LOG_LEVEL", "loud", "TICKERWIRE_LOG_LEVEL"),
    ("TICKERWIRE_PROJECTOR_PORT", "8082", "TICKERWIRE_PROJECTOR_ADMIN_PORT"),
])
def test_bad_listener_settings_stop_the_process_with_one_clear_message(var, value, word):
    with pytest.raises(ConfigError) as exc:
        Config.from_env({**REQUIRED, var: value})
    assert word in str(exc.value) and "\n" not in str(exc.value)
