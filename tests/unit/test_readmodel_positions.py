"""What "projected up to here" means, once (services/readmodel/positions.py)."""

from __future__ import annotations

from tickerwire.services.readmodel import logposition, positions


def test_a_record_is_projected_once_the_stored_position_is_past_it():
    stored = {("t.posts", 0): 5}
    assert positions.projected(stored, ("t.posts", 0), 4)
    assert not positions.projected(stored, ("t.posts", 0), 5)  # the next offset to project
    assert not positions.projected(stored, ("t.posts", 1), 0)  # nothing stored: nothing projected


def test_caught_up_needs_every_mark_reached():
    stored = {("a", 0): 3, ("a", 1): 7}
    assert positions.caught_up(stored, {("a", 0): 3, ("a", 1): 6})
    assert not positions.caught_up(stored, {("a", 0): 4, ("a", 1): 6})
    assert not positions.caught_up(stored, {("b", 0): 1})  # a partition with nothing stored
    assert positions.caught_up(stored, {("b", 0): 0})
    assert positions.caught_up({}, {})


def test_of_topic_keys_one_topics_positions_by_partition():
    stored = {("a", 0): 3, ("a", 1): 7, ("b", 0): 9}
    assert positions.of_topic(stored, "a") == {0: 3, 1: 7}
    assert positions.of_topic(stored, "c") == {}


def test_the_consistency_mark_reads_the_given_topic_parameter():
    mark = logposition.stored_sql("$2")
    assert "p.topic = $2::text" in mark and "FROM positions" in mark
