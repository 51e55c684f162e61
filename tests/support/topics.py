"""Deleting and creating topics again, as an operator would, on any broker.

Apache Kafka deletes a topic asynchronously: the DeleteTopics answer comes before the log is
gone, a create in between is refused as "already exists" (or marked for deletion), and a
consumer's metadata may still name the old partitions. So the helper waits for each step."""

from __future__ import annotations

import asyncio
import time

from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka


async def recreate_topic(config: FullConfig, name: str, timeout: float = 30.0) -> None:
    """Delete ``name`` and create it again as declared (a new, empty log)."""
    deadline = time.monotonic() + timeout
    async with kafka.started_admin(config) as admin:
        await admin.delete_topics([name])
        while name in set(await admin.list_topics()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} still listed {timeout:g} s after its deletion")
            await asyncio.sleep(0.2)
    while name not in await kafka.ensure_topics(config):
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} could not be created again within {timeout:g} s")
        await asyncio.sleep(0.2)
    while not (await kafka.cluster_topics(config)).get(name):
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} has no metadata {timeout:g} s after its creation")
        await asyncio.sleep(0.2)


async def posts_leader(config: FullConfig, partition: int = 0, timeout: float = 30.0) -> int:
    """The node that leads ``partition`` of the posts topic, as the cluster's metadata says."""
    async with asyncio.timeout(timeout), kafka.started_admin(config) as admin:
        (topic,) = await admin.describe_topics([topic_name(config.topic_prefix, POSTS)])
    return int(next(p["leader"] for p in topic["partitions"] if p["partition"] == partition))
