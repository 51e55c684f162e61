"""Topics as code: the declared topics of a deployment and how a cluster's topics differ from them.

The layout (which topics, which event types, default partitions) is the event contract's
(:mod:`tickerwire.schemas.topics`); this module adds what a deployment decides (the posts
topic's partition count, the replication factor) and the configuration every topic needs.

Every topic is keyed by entity and every record is a full snapshot, and a
``tickerwire projector rebuild`` replays every topic from its first offset. So every topic
is compacted (``cleanup.policy=compact``): Kafka keeps the newest record of every key for
ever, and never deletes a key's only record by age or size. A topic with ``delete`` in its
cleanup policy loses history once its retention passes, and a rebuild then silently
produces a read model without those entities: that is what the start-up check refuses.

Pure logic only; the broker calls live in :mod:`.kafka`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tickerwire.schemas.topics import ALL_TOPICS, POSTS, topic_name

from ..runtime.config import Config

#: Kafka's default when a topic has no cleanup.policy of its own.
KAFKA_DEFAULT_CLEANUP_POLICY = "delete"


@dataclass(frozen=True, slots=True)
class TopicState:
    """One topic as declared, or as a cluster reports it (``configs``: the values it returned)."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Difference:
    topic: str
    what: str
    #: True when this difference makes a rebuild lose history (or miss partitions).
    loses_history: bool

    def __str__(self) -> str:
        return f"{self.topic}: {self.what}" + (" (a rebuild would lose history)" if self.loses_history else "")


def declared_topics(config: Config) -> tuple[TopicState, ...]:
    """Every topic of this deployment with its partitions, replication factor and configuration."""
    rf = config.topic_replication_factor
    configs = {"cleanup.policy": "compact"}
    if rf > 1:
        # With acks=all, a write is acknowledged once two replicas have it: one broker can fail.
        configs["min.insync.replicas"] = str(min(2, rf))
    out = []
    for spec in ALL_TOPICS:
        partitions = config.topic_posts_partitions if spec is POSTS else spec.partitions
        out.append(TopicState(topic_name(config.topic_prefix, spec), partitions, rf, dict(configs)))
    return tuple(out)


def compare(declared: tuple[TopicState, ...], actual: Mapping[str, TopicState]) -> list[Difference]:
    """Each way the cluster's topics differ from the declaration, in declaration order."""
    diffs: list[Difference] = []
    for want in declared:
        have = actual.get(want.name)
        if have is None:
            diffs.append(Difference(want.name, "missing (run `tickerwire topics ensure`)", False))
            continue
        if have.partitions != want.partitions:
            # Rebuild, `up` and the projector's catch-up read the declared partitions.
            diffs.append(Difference(want.name, f"{have.partitions} partitions, declared {want.partitions}", True))
        if have.replication_factor < want.replication_factor:
            diffs.append(
                Difference(
                    want.name,
                    f"replication factor {have.replication_factor}, declared {want.replication_factor}",
                    False,
                )
            )
        for key, value in want.configs.items():
            got = have.configs.get(key)
            if key == "cleanup.policy":
                got = got or KAFKA_DEFAULT_CLEANUP_POLICY
                if got != value:
                    diffs.append(Difference(want.name, f"cleanup.policy={got}, declared {value}", True))
            elif got != value:
                diffs.append(
                    Difference(want.name, f"{key}={got if got is not None else '(unset)'}, declared {value}", False)
                )
    return diffs
