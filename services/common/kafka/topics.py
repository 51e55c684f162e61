"""Administering the declared topics (:mod:`.declaration`): creating the missing ones, and
reading how the cluster's differ from the declaration."""

from __future__ import annotations

import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from ..runtime.config import Config
from ..runtime.errors import BrokerUnavailable
from .clients import started_admin, translate_broker_error
from .declaration import Difference, TopicState, compare, declared_topics

log = logging.getLogger(__name__)


async def ensure_declared_before(config: Config, what: str) -> None:
    """Create the missing declared topics before a command reads or writes them: otherwise its
    first request would have the broker create them on demand (Apache Kafka's default
    ``auto.create.topics.enable``, and other Kafka-protocol brokers) with the broker's settings, a delete policy and
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
