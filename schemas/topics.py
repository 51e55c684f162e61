"""Topics of the log and how they are partitioned. Which event types travel on each is
declared with the event types (:mod:`tickerwire.schemas.models`).

Every record's key is the entity key of :func:`tickerwire.schemas.models.entity_key`, so the
default murmur2 partitioner keeps all versions of one entity on one partition, in order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopicSpec:
    suffix: str
    partitions: int
    description: str


POSTS = TopicSpec(
    "posts.v1",
    4,
    "Post snapshots with every translation. Read by the projector (consumer group) and by every stream process.",
)
CATALOG = TopicSpec(
    "catalog.v1",
    2,
    "Token catalog, category taxonomy and locales.",
)
ACCESS = TopicSpec(
    "access.v1",
    2,
    "Workspaces, API key hashes, embeds and badge heartbeats.",
)

ALL_TOPICS: tuple[TopicSpec, ...] = (POSTS, CATALOG, ACCESS)


def topic_name(prefix: str, spec: TopicSpec) -> str:
    return f"{prefix}.{spec.suffix}"
