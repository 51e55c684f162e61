"""Topics as code: the declaration and the comparison with a cluster's topics (pure logic)."""

from __future__ import annotations

from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.kafka.declaration import TopicState, compare, declared_topics


def config(**overrides) -> FullConfig:
    return FullConfig(database_url="postgresql://x/y", kafka_bootstrap_servers="k:9092", **overrides)


def matching(cfg: FullConfig) -> dict[str, TopicState]:
    return {d.name: d for d in declared_topics(cfg)}


def test_every_topic_is_compacted_and_replicated_as_configured():
    decls = declared_topics(config(topic_posts_partitions=12))
    assert [d.name for d in decls] == ["tickerwire.posts.v1", "tickerwire.catalog.v1", "tickerwire.access.v1"]
    assert [d.partitions for d in decls] == [12, 2, 2]
    for d in decls:
        assert d.replication_factor == 3
        assert d.configs == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    assert declared_topics(config(topic_replication_factor=1))[0].configs == {"cleanup.policy": "compact"}


def test_a_matching_cluster_has_no_difference():
    cfg = config()
    assert compare(declared_topics(cfg), matching(cfg)) == []


def test_each_difference_is_listed_and_history_loss_is_marked():
    cfg = config()
    actual = matching(cfg)
    posts, catalog, access = (d.name for d in declared_topics(cfg))
    actual[posts] = TopicState(posts, 6, 3, {"cleanup.policy": "delete", "min.insync.replicas": "2"})
    actual[catalog] = TopicState(catalog, 2, 1, {"min.insync.replicas": "1"})  # no policy: Kafka's default, delete
    del actual[access]
    diffs = compare(declared_topics(cfg), actual)
    assert [str(d) for d in diffs] == [
        "tickerwire.posts.v1: 6 partitions, declared 4 (a rebuild would lose history)",
        "tickerwire.posts.v1: cleanup.policy=delete, declared compact (a rebuild would lose history)",
        "tickerwire.catalog.v1: replication factor 1, declared 3",
        "tickerwire.catalog.v1: cleanup.policy=delete, declared compact (a rebuild would lose history)",
        "tickerwire.catalog.v1: min.insync.replicas=1, declared 2",
        "tickerwire.access.v1: missing (run `tickerwire topics ensure`)",
    ]
    assert [d.loses_history for d in diffs] == [True, True, False, True, False, False]


def test_compact_and_delete_together_still_lose_history():
    cfg = config(topic_replication_factor=1)
    actual = matching(cfg)
    posts = declared_topics(cfg)[0].name
    actual[posts] = TopicState(posts, 4, 1, {"cleanup.policy": "compact,delete"})
    assert [d.loses_history for d in compare(declared_topics(cfg), actual)] == [True]
