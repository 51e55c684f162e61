"""Topics of the log, which event types travel on each, and how they are partitioned.

Every record's key is the entity key of :func:`tickerwire.schemas.models.entity_key`, so the
default murmur2 partitioner keeps all versions of one entity on one partition, in order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopicSpec:
    suffix: str
    partitions: int
    event_types: frozenset[str]
    description: str


POSTS = TopicSpec(
    "posts.v1",
    4,
    frozenset({"post"}),
    "Post snapshots with every translation. Read by the projector (consumer group) and by every stream process.",
)
CATALOG = TopicSpec(
    "catalog.v1",
    2,
    frozenset({"token", "category", "locale"}),
    "Token catalog, category taxonomy and locales.",
)
ACCESS = TopicSpec(
    "access.v1",
    2,
    frozenset({"workspace", "api_key", "embed", "heartbeat"}),
    "Workspaces, API key hashes, embeds and badge heartbeats.",
)

ALL_TOPICS: tuple[TopicSpec, ...] = (POSTS, CATALOG, ACCESS)


def topic_name(prefix: str, spec: TopicSpec) -> str:
    return f"{prefix}.{spec.suffix}"


def topic_for_event_type(prefix: str, event_type: str) -> str:
    for spec in ALL_TOPICS:
        if event_type in spec.event_types:
            return topic_name(prefix, spec)
    raise KeyError(event_type)
