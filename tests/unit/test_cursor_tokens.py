"""Resume cursor tokens (services/readmodel/cursors.py): what is written reads back, anything
else is refused, and a mark only moves forward."""

from __future__ import annotations

import base64

import pytest

from tickerwire.services.readmodel import cursors


def token(text: str) -> str:
    return cursors.PREFIX + base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def test_a_cursor_reads_back_as_written():
    cursor = cursors.Cursor("a1b2c3", {0: (17, ""), 3: (9, "pt-BR"), 1: (0, "")})
    again = cursors.decode(cursor.encode())
    assert again == cursor and again.mark(2) == cursors.START and again.mark(3) == (9, "pt-BR")
    assert cursors.decode(cursors.Cursor("e", {}).encode()) == cursors.Cursor("e", {})
    assert "=" not in cursor.encode() and cursor.encode().isascii()


@pytest.mark.parametrize("bad", [
    "", "c1.", "c2." + token("e|0:1")[3:], token("E|0:1"), token("e|0:1|0:2"), token("e|x:1"), token("e|0:-1"),
    token("e|0:1:de_DE"), token("e|0:1:"), token("e|0:" + "9" * 19), token("e|0:1|"), "c1.@@@", "c1." + "A" * 9000,
    token("|0:1"), cursors.PREFIX + base64.urlsafe_b64encode("é|0:1".encode()).decode(),
])
def test_anything_else_is_refused(bad):
    with pytest.raises(cursors.InvalidCursor):
        cursors.decode(bad)


def test_a_mark_orders_announcements_by_offset_then_locale_and_only_moves_forward():
    assert cursors.after((5, "de-DE"), 5, "en-US") and not cursors.after((5, "de-DE"), 5, "de-DE")
    assert cursors.after((5, ""), 5, "de-DE") and not cursors.after((6, ""), 5, "zh-CN")
    marks = {0: (5, "en-US")}
    cursors.advance(marks, 0, (5, "de-DE"))
    cursors.advance(marks, 1, (2, ""))
    assert marks == {0: (5, "en-US"), 1: (2, "")}
    cursors.advance(marks, 0, (6, ""))
    assert marks[0] == (6, "")
