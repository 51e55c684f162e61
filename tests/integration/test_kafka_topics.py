"""Topics as code and Kafka security against the real (embedded or containerized) broker:
`tickerwire topics ensure|check`, the services' start-up refusal, and TLS as aiokafka speaks it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys

import aiohttp
import orjson
import pytest
from aiokafka.admin import NewTopic
from prometheus_client import CollectorRegistry

from tests.support.tls import Pki, TlsFront, make_pki
from tickerwire.devstack.embedded.ports import free_port
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka
from tickerwire.services.common.kafka.topicgate import TopicGate, require_safe_topics
from tickerwire.services.common.runtime.errors import ConfigError


def env_for(kafka_bootstrap: str, prefix: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKERWIRE_")}
    env.update(
        TICKERWIRE_DATABASE_URL="postgresql://unused/unused",
        TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        TICKERWIRE_TOPIC_PREFIX=prefix,
        TICKERWIRE_TOPIC_REPLICATION_FACTOR="1",
        TICKERWIRE_STATE_DIR="/nonexistent",
        **extra,
    )
    return env


def tls_env(port: int, prefix: str, pki: Pki, protocol: str, **extra: str) -> dict[str, str]:
    """The settings of a client that speaks ``protocol`` to the TLS front on ``port``, trusting
    ``pki``'s CA and presenting its client certificate."""
    return env_for(
        f"127.0.0.1:{port}",
        prefix,
        TICKERWIRE_KAFKA_SECURITY_PROTOCOL=protocol,
        TICKERWIRE_KAFKA_SSL_CAFILE=str(pki.ca),
        TICKERWIRE_KAFKA_SSL_CERTFILE=str(pki.client_cert),
        TICKERWIRE_KAFKA_SSL_KEYFILE=str(pki.client_key),
        **extra,
    )


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_ensure_creates_compacted_topics_and_check_then_passes(kafka_bootstrap, topic_prefix):
    env = env_for(kafka_bootstrap, topic_prefix)
    result = cli(env, "topics", "ensure")
    assert result.returncode == 0, result.stderr
    assert f"created {topic_prefix}.posts.v1" in result.stdout
    assert "topics match the declaration" in result.stdout
    states = await kafka.cluster_topics(FullConfig.from_env(env))
    assert {name: (s.partitions, s.configs.get("cleanup.policy")) for name, s in states.items()} == {
        f"{topic_prefix}.posts.v1": (4, "compact"),
        f"{topic_prefix}.catalog.v1": (2, "compact"),
        f"{topic_prefix}.access.v1": (2, "compact"),
    }
    assert cli(env, "topics", "check").returncode == 0


async def test_check_reports_a_topic_without_compaction_and_services_refuse_it(kafka_bootstrap, topic_prefix):
    env = env_for(kafka_bootstrap, topic_prefix)
    config = FullConfig.from_env(env)
    async with kafka.started_admin(config) as admin:  # created by hand, as a default cluster would
        await admin.create_topics([NewTopic(f"{topic_prefix}.posts.v1", 4, 1)])
    await kafka.ensure_topics(config)

    result = cli(env, "topics", "check")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{topic_prefix}.posts.v1: cleanup.policy=delete, declared compact (a rebuild would lose history)"
    ]
    assert "1 difference(s)" in result.stderr

    with pytest.raises(ConfigError, match="TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS=1"):
        await require_safe_topics(config, create=True)
    await require_safe_topics(FullConfig.from_env({**env, "TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS": "1"}), create=False)

    # A service refuses it loudly and waits, instead of exiting: an ERROR line, the gauge and
    # readiness on its admin listener, and its partner port not bound.
    port, admin_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tickerwire.services.cli.main",
        "stream",
        env={**env, "TICKERWIRE_STREAM_PORT": str(port), "TICKERWIRE_STREAM_ADMIN_PORT": str(admin_port)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as http:
            readiness = None
            for _ in range(100):
                await asyncio.sleep(0.2)
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with http.get(f"http://127.0.0.1:{admin_port}/readyz") as resp:
                        readiness = (resp.status, await resp.json())
                        if "lose rebuild history" in readiness[1]["checks"]["topics"]["detail"]:
                            break
            assert readiness is not None and readiness[0] == 503, readiness
            assert readiness[1]["checks"]["topics"]["ok"] is False
            assert f"{topic_prefix}.posts.v1: cleanup.policy=delete" in readiness[1]["checks"]["topics"]["detail"]
            async with http.get(f"http://127.0.0.1:{admin_port}/metrics") as resp:
                assert 'tickerwire_topic_differences{kind="loses_history"} 1.0' in await resp.text()
            with pytest.raises(aiohttp.ClientConnectionError):
                async with http.get(f"http://127.0.0.1:{port}/api/v1/developer/stream"):
                    pass
        assert proc.returncode is None  # still running, waiting for the topics
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    errors = [
        orjson.loads(line) for line in err.decode().splitlines() if line.startswith("{") and '"level":"error"' in line
    ]
    assert any(
        "topics would lose rebuild history" in e["msg"] and "cleanup.policy=delete" in e["msg"] for e in errors
    ), err
    assert "Traceback" not in err.decode()
    assert proc.returncode == 0


async def test_a_refused_topic_setting_lets_the_process_start_once_fixed(kafka_bootstrap, topic_prefix):
    env = env_for(kafka_bootstrap, topic_prefix)
    config = FullConfig.from_env(env)
    async with kafka.started_admin(config) as admin:
        await admin.create_topics([NewTopic(f"{topic_prefix}.posts.v1", 4, 1)])  # not compacted
    await kafka.ensure_topics(config)
    registry = CollectorRegistry()
    gate = TopicGate(config, registry, create=False, recheck_s=0.2)
    waiting = asyncio.create_task(gate.wait_until_safe())
    try:
        for _ in range(50):
            await asyncio.sleep(0.1)
            if "lose rebuild history" in (await gate.check())[1]:
                break
        assert not (await gate.check())[0] and not waiting.done()
        assert registry.get_sample_value("tickerwire_topic_differences", {"kind": "loses_history"}) == 1
        # The operator's way out: the topic, still empty, is deleted and created as declared.
        async with kafka.started_admin(config) as admin:
            await admin.delete_topics([f"{topic_prefix}.posts.v1"])
        await kafka.ensure_topics(config)
        await asyncio.wait_for(waiting, 10)
    finally:
        waiting.cancel()
    assert await gate.check() == (True, "ok")
    assert registry.get_sample_value("tickerwire_topic_differences", {"kind": "loses_history"}) == 0


async def test_a_topic_recreated_while_the_process_runs_is_reported_not_ignored(kafka_bootstrap, topic_prefix, caplog):
    # An emptied broker on which a client's request had the topic created with the broker's
    # own settings: the gauge kept its start-up 0, so no alert could fire.
    config = FullConfig.from_env(env_for(kafka_bootstrap, topic_prefix))
    await kafka.ensure_topics(config)
    registry = CollectorRegistry()
    gate = TopicGate(config, registry, create=False, watch_s=0.2)
    await gate.wait_until_safe()
    watching = asyncio.create_task(gate.watch())
    try:
        async with kafka.started_admin(config) as admin:
            await admin.delete_topics([f"{topic_prefix}.posts.v1"])
            await asyncio.sleep(0.5)
            await admin.create_topics(
                [NewTopic(f"{topic_prefix}.posts.v1", 4, 1)]
            )  # the broker's defaults: not compacted
        for _ in range(100):
            await asyncio.sleep(0.1)
            if registry.get_sample_value("tickerwire_topic_differences", {"kind": "loses_history"}):
                break
        assert registry.get_sample_value("tickerwire_topic_differences", {"kind": "loses_history"}) == 1
        ready, detail = await gate.check()
        assert ready and "would lose rebuild history" in detail  # still consuming, and saying why not ok
        assert any(r.levelname == "ERROR" and "posts.v1" in r.getMessage() for r in caplog.records)
    finally:
        watching.cancel()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is needed to make test certificates")
async def test_clients_speak_kafka_over_the_configured_tls_with_a_client_certificate(kafka_bootstrap, tmp_path):
    pki = make_pki(tmp_path)
    async with TlsFront(pki, kafka_bootstrap.split(",")[0]) as front:
        env = tls_env(
            front.port,
            "tls",
            pki,
            "SASL_SSL",
            TICKERWIRE_KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
            TICKERWIRE_KAFKA_SASL_USERNAME="svc",
            TICKERWIRE_KAFKA_SASL_PASSWORD="pw",
        )
        producer = kafka.producer(FullConfig.from_env(env), request_timeout_ms=5000)
        try:
            await producer.start()
        except Exception:
            pass  # the broker behind the front speaks no SASL: what reached it is what counts
        finally:
            await producer.stop()
    # The TLS handshake verified the server against our CA and presented our client certificate ...
    assert "tickerwire-test-client" in front.client_subjects
    # ... and inside it aiokafka asked for API versions, then a SASL handshake with our mechanism.
    assert front.received[4:6] == (18).to_bytes(2, "big")  # ApiVersions
    assert b"SCRAM-SHA-512" in bytes(front.received)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is needed to make test certificates")
async def test_a_broker_certificate_the_client_does_not_trust_is_a_refusal_named_once_not_an_outage(
    kafka_bootstrap, tmp_path
):
    broker_side, client_side = tmp_path / "broker", tmp_path / "client"
    broker_side.mkdir()
    client_side.mkdir()
    pki, other = make_pki(broker_side), make_pki(client_side)  # the client trusts another CA
    async with TlsFront(pki, kafka_bootstrap.split(",")[0]) as front:
        env = tls_env(front.port, "tls-refused", other, "SSL")
        with pytest.raises(ConfigError, match="refused this client: SSLCertVerificationError"):  # not retried
            await kafka.check_topics(FullConfig.from_env(env))
        # The command line: one line naming the cause, status 2 (the front runs on this loop,
        # so the command runs without blocking it).
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tickerwire.services.cli.main",
            "topics",
            "check",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 2, lines
    assert len(lines) == 1, lines
    assert "refused this client" in lines[0] and "SSLCertVerificationError" in lines[0]
    assert "TICKERWIRE_KAFKA_SSL_" in lines[0]
