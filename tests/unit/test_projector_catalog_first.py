"""A fresh assignment applies the catalog before posts: the posts partitions are paused at once,
held while a catalog partition is behind its log end, and resumed once it is not (or after the
bound), never resumed when the log watch stopped them."""

from __future__ import annotations

from aiokafka import TopicPartition

from tickerwire.services.projector import catalog as runner
from tickerwire.services.projector.metrics import ProjectorMetrics
from tickerwire.services.projector.progress import PartitionProgress

CAT = [TopicPartition("t.catalog.v1", p) for p in range(2)]
POSTS = [TopicPartition("t.posts.v1", p) for p in range(2)]


class Consumer:
    def __init__(self, ends: dict[TopicPartition, int]) -> None:
        self.ends, self.paused = ends, set()

    async def end_offsets(self, tps):
        return {tp: self.ends[tp] for tp in tps}

    def pause(self, *tps):
        self.paused |= set(tps)

    def resume(self, *tps):
        self.paused -= set(tps)

    def assignment(self):
        return {*CAT, *POSTS}


def first(consumer: Consumer) -> tuple[runner.CatalogFirst, PartitionProgress]:
    progress = PartitionProgress(ProjectorMetrics(), lambda: None)
    for tp in CAT + POSTS:
        progress.assigned(tp, 0)
    return runner.CatalogFirst(progress, "t"), progress


async def test_posts_wait_until_every_catalog_partition_reached_its_end():
    consumer = Consumer({CAT[0]: 3, CAT[1]: 0})
    first_, progress = first(consumer)
    first_.pause(consumer, CAT + POSTS)
    assert consumer.paused == set(POSTS)  # at once, before the stored positions are read
    await first_.hold(consumer, CAT + POSTS, stopped=[])
    assert consumer.paused == set(POSTS)
    progress.committed(CAT[0], 2)
    first_.resume_when_done(consumer, stopped=[])
    assert consumer.paused == set(POSTS)
    progress.committed(CAT[0], 3)
    first_.resume_when_done(consumer, stopped=[POSTS[1]])
    assert consumer.paused == {POSTS[1]}  # stopped by the log watch: it stays paused
    assert not first_.held


async def test_a_caught_up_catalog_holds_nothing_and_a_stuck_one_only_for_the_bound(monkeypatch):
    consumer = Consumer({CAT[0]: 0, CAT[1]: 0})
    first_, _ = first(consumer)
    first_.pause(consumer, CAT + POSTS)
    await first_.hold(consumer, CAT + POSTS, stopped=[])
    assert consumer.paused == set()
    consumer.ends[CAT[1]] = 5
    first_.pause(consumer, CAT + POSTS)
    await first_.hold(consumer, CAT + POSTS, stopped=[])
    assert consumer.paused == set(POSTS)
    monkeypatch.setattr(runner, "CATALOG_FIRST_MAX_S", 0.0)
    first_.resume_when_done(consumer, stopped=[])
    assert consumer.paused == set()


async def test_an_assignment_without_catalog_partitions_holds_nothing():
    consumer = Consumer({})
    first_, _ = first(consumer)
    first_.pause(consumer, POSTS)
    await first_.hold(consumer, POSTS, stopped=[])
    assert consumer.paused == set() and not first_.held
