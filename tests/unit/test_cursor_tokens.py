"""Resume cursor tokens (services/readmodel/cursors.py): what is written reads back, anything
else is refused, and a mark only moves forward."""

from __future__ import annotations

import re
import time

import pytest

from tickerwire.services.readmodel import cursors


def test_a_cursor_reads_back_as_written():
    cursor = cursors.Cursor("a1b2c3", {0: (17, ""), 3: (9, "pt-BR"), 1: (0, "")})
    again = cursors.decode(cursor.encode())
    assert again == cursor and again.mark(2) == cursors.START and again.mark(3) == (9, "pt-BR")
    assert cursors.decode(cursors.Cursor("e", {}).encode()) == cursors.Cursor("e", {})
    assert cursor.encode() == "c1~a1b2c3~0.17~1.0~3.9.pt-BR"  # nothing to escape in a URL
    assert re.fullmatch(cursors.PATTERN, cursor.encode())  # the pattern the API documents


def test_a_partition_named_twice_keeps_its_furthest_mark():
    assert cursors.decode("c1~e~0.5~0.7.de-DE~0.6").marks == {0: (7, "de-DE")}


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "c1~",
        "c2~e~0.1",
        "c1~E~0.1",
        "c1~e~x.1",
        "c1~e~0.-1",
        "c1~e~0.1.de_DE",
        "c1~e~0.1.",
        "c1~e~0." + "9" * 19,
        "c1~e~0.1~",
        "c1~e~0",
        "c1~e~0.1.de-DE.x",
        "c1~e ~0.1",
        "c1~e~0.1" + "~0.1" * 3000,
        "c1~e~12345.1",
        "c1~é~0.1",
        "c1~" + "e" * 33,
    ],
)
def test_anything_else_is_refused(bad):
    with pytest.raises(cursors.InvalidCursor):
        cursors.decode(bad)
    assert len(bad) > cursors.MAX_TOKEN or not re.fullmatch(cursors.PATTERN, bad)


def test_a_mark_orders_announcements_by_offset_then_locale_and_only_moves_forward():
    assert cursors.after((5, "de-DE"), 5, "en-US") and not cursors.after((5, "de-DE"), 5, "de-DE")
    assert cursors.after((5, ""), 5, "de-DE") and not cursors.after((6, ""), 5, "zh-CN")
    marks = {0: (5, "en-US")}
    cursors.advance(marks, 0, (5, "de-DE"))
    cursors.advance(marks, 1, (2, ""))
    assert marks == {0: (5, "en-US"), 1: (2, "")}
    cursors.advance(marks, 0, (6, ""))
    assert marks[0] == (6, "")


FRONTIER = {0: 120, 1: 7}


@pytest.mark.parametrize(
    "token",
    [
        "c1~e",  # the start of every partition
        "c1~e~0.120~1.7",  # the frontier itself: what /changes hands out with has_more false
        "c1~e~0.119.zh-CN~1.6.de-DE",  # the last committed record's announcements
        "c1~e~1.0",
    ],
)
def test_a_cursor_at_or_below_the_committed_frontier_could_have_been_issued(token):
    assert cursors.not_issued(cursors.decode(token), FRONTIER) is None


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("c1~e~0.121", "partition 0 is past"),  # past the log end
        ("c1~e~0.120.de-DE", "partition 0 is past"),  # the record at 120 is not committed yet
        ("c1~e~0.920~1.7", "partition 0 is past"),  # one digit changed
        ("c1~e~0.12~2.3", "partition 2, which"),  # a partition the posts topic does not have
        ("c1~e~0.12~2.0", "partition 2, which"),
    ],
)
def test_a_cursor_past_the_frontier_or_naming_an_unknown_partition_was_not_issued(token, why):
    reason = cursors.not_issued(cursors.decode(token), FRONTIER)
    assert reason is not None and why in reason, reason


# --------------------------------------------------------------------------- a cursor ahead of the frontier


def test_a_cursor_past_the_frontier_on_a_known_partition_is_ahead_one_naming_another_is_not():
    frontier = {0: 10, 1: 4}
    assert cursors.ahead(cursors.Cursor("e", {0: (10, "en-US")}), frontier)  # covers record 10: needs 11
    assert not cursors.ahead(cursors.Cursor("e", {0: (10, ""), 1: (3, "de-DE")}), frontier)
    assert not cursors.ahead(cursors.Cursor("e", {0: (99, ""), 7: (1, "")}), frontier)  # partition 7: never issued


async def test_a_cursor_ahead_is_read_again_until_the_frontier_reaches_it_within_the_bound():
    frontiers = iter([{0: 3}, {0: 3}, {0: 6}, {0: 9}])
    reads = []

    async def read() -> cursors.Changes:
        reads.append(1)
        return cursors.Changes("e", next(frontiers), [])

    got = await cursors.read_reaching(read, cursors.Cursor("e", {0: (5, "")}), wait_s=5.0, poll_s=0.001)
    assert got.frontier == {0: 6} and len(reads) == 3


async def test_a_cursor_that_stays_ahead_is_given_up_on_after_the_bound():
    async def read() -> cursors.Changes:
        return cursors.Changes("e", {0: 3}, [])

    started = time.monotonic()
    got = await cursors.read_reaching(read, cursors.Cursor("e", {0: (50, "")}), wait_s=0.2, poll_s=0.05)
    assert got.frontier == {0: 3} and 0.2 <= time.monotonic() - started < 2.0
    assert cursors.not_issued(cursors.Cursor("e", {0: (50, "")}), got.frontier) is not None


async def test_a_cursor_of_another_epoch_or_none_is_not_waited_for():
    calls = []

    async def read() -> cursors.Changes:
        calls.append(1)
        return cursors.Changes("new", {0: 3}, [])

    await cursors.read_reaching(read, cursors.Cursor("old", {0: (50, "")}), wait_s=5.0)
    await cursors.read_reaching(read, None, wait_s=5.0)
    assert len(calls) == 2
