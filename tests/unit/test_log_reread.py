"""Where the stream's feed reads a partition again after a log discontinuity (pure logic)."""

from __future__ import annotations

from tickerwire.services.common.kafka.logcheck import Discontinuity, reread_from


def gap(position: int, log_start: int, log_end: int) -> Discontinuity:
    return Discontinuity("t.posts.v1", 0, position, log_start, log_end)


def test_a_new_log_is_read_from_its_start():
    # The topic re-created: 20 records since, all stamped after the newest one read before.
    assert reread_from(gap(424, 0, 20), newer_than_seen=0, looked_up=True) == 0


def test_a_log_cut_back_is_read_from_the_first_record_not_read_yet():
    # Unclean leader election: offsets 0..899 are the records already read (at their offsets);
    # 900.. were appended since. Reading from 0 would push 900 posts again.
    assert reread_from(gap(1000, 0, 950), newer_than_seen=900, looked_up=True) == 900
    # Nothing newer than what was read: resume at the end, push nothing again.
    assert reread_from(gap(1000, 0, 900), newer_than_seen=None, looked_up=True) == 900


def test_records_deleted_unread_are_skipped_to_the_log_start():
    assert reread_from(gap(10, 500, 800), newer_than_seen=None, looked_up=True) == 500
    assert reread_from(gap(10, 500, 800), newer_than_seen=None, looked_up=False) == 500


def test_without_an_answer_every_record_counts_as_new():
    # At least once, never lost: a broker that cannot look up offsets by time.
    assert reread_from(gap(1000, 0, 950), newer_than_seen=None, looked_up=False) == 0


def test_the_answer_is_kept_within_the_log():
    assert reread_from(gap(1000, 100, 950), newer_than_seen=20, looked_up=True) == 100
    assert reread_from(gap(1000, 0, 950), newer_than_seen=5000, looked_up=True) == 950
