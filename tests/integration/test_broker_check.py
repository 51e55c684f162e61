"""Readiness's broker check against the real (embedded) broker, a port that refuses, a
server that accepts connections but never answers (what a frozen broker looks like from
outside: the kernel still accepts), and TLS as configured."""

from __future__ import annotations

import asyncio
import socket
import ssl
import sys
import time

import pytest

from tests.support.tls import TlsFront, make_pki
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka
from tickerwire.services.common.runtime.errors import ConfigError


def config(bootstrap: str, **overrides) -> FullConfig:
    return FullConfig(database_url="postgresql://unused/unused", kafka_bootstrap_servers=bootstrap, **overrides)


async def test_a_broker_that_answers_is_ready(kafka_bootstrap):
    assert await kafka.broker_check(config(kafka_bootstrap)) == (True, "ok")


async def test_a_refused_port_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        ok, detail = await kafka.broker_check(config(f"127.0.0.1:{port}"))
    assert not ok and detail.startswith("broker unreachable")


async def test_a_broker_that_accepts_but_never_answers_is_not_ready_within_the_bound():
    accepted = []

    async def silent(reader, writer):
        accepted.append(await reader.read(100))  # reads the request, answers nothing
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        ok, detail = await kafka.broker_check(config(f"127.0.0.1:{port}"), timeout_s=0.5)
        took = time.monotonic() - started
    finally:
        server.close()
    assert not ok and "does not answer a Kafka request" in detail
    assert took < 0.9
    assert accepted and accepted[0][4:6] == (18).to_bytes(2, "big")  # it asked: ApiVersions


async def test_one_answering_server_of_several_is_enough(kafka_bootstrap):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        refused = f"127.0.0.1:{s.getsockname()[1]}"
        assert await kafka.broker_check(config(f"{refused},{kafka_bootstrap}")) == (True, "ok")


async def test_the_check_speaks_the_configured_tls(kafka_bootstrap, tmp_path):
    pki = make_pki(tmp_path)
    async with TlsFront(pki, kafka_bootstrap.split(",")[0]) as front:
        settings = dict(
            kafka_security_protocol="SSL",
            kafka_ssl_cafile=str(pki.ca),
            kafka_ssl_certfile=str(pki.client_cert),
            kafka_ssl_keyfile=str(pki.client_key),
        )
        assert await kafka.broker_check(config(f"127.0.0.1:{front.port}", **settings), timeout_s=3) == (True, "ok")
        # Without TLS the same port is a server that never answers a plain request.
        ok, _ = await kafka.broker_check(config(f"127.0.0.1:{front.port}"), timeout_s=0.5)
    assert not ok
    assert "tickerwire-test-client" in front.client_subjects


async def test_a_private_ca_without_key_usage_is_accepted_with_the_relaxed_x509_setting(kafka_bootstrap, tmp_path):
    # Many private CAs lack keyUsage; Python 3.13's default context refuses them (VERIFY_X509_STRICT).
    pki = make_pki(tmp_path, key_usage=False)
    async with TlsFront(pki, kafka_bootstrap.split(",")[0]) as front:
        settings = dict(
            kafka_security_protocol="SSL",
            kafka_ssl_cafile=str(pki.ca),
            kafka_ssl_certfile=str(pki.client_cert),
            kafka_ssl_keyfile=str(pki.client_key),
        )
        strict = config(f"127.0.0.1:{front.port}", **settings)
        relaxed = config(f"127.0.0.1:{front.port}", kafka_ssl_relax_x509=True, **settings)
        assert await kafka.broker_check(relaxed, timeout_s=3) == (True, "ok")
        assert not kafka.security_options(relaxed)["ssl_context"].verify_flags & ssl.VERIFY_X509_STRICT
        if sys.version_info >= (3, 13):
            ok, _ = await kafka.broker_check(strict, timeout_s=3)
            assert not ok
            with pytest.raises(
                ConfigError, match="refused this client: .*key usage.*TICKERWIRE_KAFKA_SSL_RELAX_X509=true"
            ):
                await kafka.check_topics(strict)
        else:  # the default context of older Pythons has no strict flag to clear
            assert await kafka.broker_check(strict, timeout_s=3) == (True, "ok")
