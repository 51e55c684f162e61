"""The testcontainers path: with a Docker engine, the session runs on Apache Kafka (KRaft) and
PostgreSQL containers; without one, these tests skip and say why."""

from __future__ import annotations

import os

import asyncpg
import pytest
from aiokafka.admin import NewTopic

from tests.support.containers import docker_available, engines
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka

pytestmark = pytest.mark.skipif(
    not docker_available() or bool(os.environ.get("TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS")),
    reason=f"the session does not use containers: {engines()}",
)


async def test_the_broker_is_apache_kafka_and_reports_its_default_cleanup_policy(kafka_bootstrap, topic_prefix):
    config = FullConfig.from_env(
        {
            "TICKERWIRE_DATABASE_URL": "postgresql://unused/unused",
            "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "TICKERWIRE_TOPIC_PREFIX": topic_prefix,
            "TICKERWIRE_TOPIC_REPLICATION_FACTOR": "1",
        }
    )
    async with kafka.started_admin(config) as admin:
        await admin.create_topics([NewTopic(f"{topic_prefix}.posts.v1", 4, 1)])
    await kafka.ensure_topics(config)
    states = await kafka.cluster_topics(config)
    # Apache Kafka reports every setting, defaults included.
    assert states[f"{topic_prefix}.posts.v1"].configs["cleanup.policy"] == "delete"
    assert states[f"{topic_prefix}.catalog.v1"].configs["cleanup.policy"] == "compact"
    assert [d.loses_history for d in await kafka.check_topics(config)] == [True]


async def test_the_database_is_a_postgresql_container(pg_dsn):
    if os.environ.get("TICKERWIRE_TEST_DATABASE_URL"):
        pytest.skip("TICKERWIRE_TEST_DATABASE_URL points the session at your PostgreSQL")
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert (await conn.fetchval("SHOW server_version_num")).startswith("16")
    finally:
        await conn.close()
