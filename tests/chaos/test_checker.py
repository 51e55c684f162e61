"""The checker's judgement on made-up histories (pure logic): each kind of violation it names
is found, and a clean history has none."""

from __future__ import annotations

from tests.chaos.checker import deliveries
from tests.chaos.history import Delivery, History


def history(got: list[Delivery], walked: list, aborted: frozenset[int] = frozenset()) -> History:
    h = History(seed=5)
    h.published = {(1, "en-US"): 0.0, (1, "de-DE"): 0.0, (2, "en-US"): 0.0}
    h.aborted = set(aborted)
    h.deliveries["f"] = got
    h.walked = walked
    return h


CLEAN = [Delivery((1, "de-DE"), 0, 4, 1.0), Delivery((1, "en-US"), 0, 4, 1.0), Delivery((2, "en-US"), 1, 7, 1.0)]
WALKED = [(1, "de-DE"), (1, "en-US"), (2, "en-US")]


def test_a_clean_history_has_no_violation():
    assert deliveries(history(CLEAN, WALKED)) == []


def test_a_missing_a_doubled_and_an_aborted_announcement_are_each_named():
    got = [*CLEAN[:2], CLEAN[1], Delivery((9, "en-US"), 1, 9, 1.0)]
    found = deliveries(history(got, WALKED[:2], aborted=frozenset({9})))
    assert any(v.startswith("f: 1 announcements never received") for v in found), found
    assert any(v.startswith("f: 1 received more than once") for v in found), found
    assert any(v.startswith("f: received posts of an aborted transaction") for v in found), found
    assert "/changes walk: 1 announcements never received, e.g. [(2, 'en-US')]" in found, found


def test_an_announcement_below_the_last_of_its_partition_is_out_of_order():
    got = [CLEAN[1], CLEAN[0], CLEAN[2]]  # (4, en-US) before (4, de-DE): not ascending
    assert deliveries(history(got, WALKED)) == [
        "f: out of order on partition 0: (4, 'de-DE') after (4, 'en-US') ((1, 'de-DE'))"
    ]
