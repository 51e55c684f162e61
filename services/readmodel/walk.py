"""One walk of the announcements from a cursor (docs/resume.md): what ``GET /changes``, a stream
resume's replay and any later reader of the position space share. Each maps the result onto its
transport; none repeats a step.

A walk reads the page after a cursor (:func:`.cursors.read_changes`) through the reader's
:class:`.filters.AnnouncementFilter`, in the locales the service answers in that the filter
asks for (:meth:`.filters.AnnouncementFilter.locales_read`), judges the cursor against the
epoch and the committed frontier read in the same snapshot (waiting, bounded, for a frontier
that is behind it: :func:`.cursors.read_reaching`), and advances the marks over what it read.
The answer is a :class:`Page`, or a :class:`Refusal` that names why the cursor cannot be walked
(another epoch, or one this read model cannot have issued).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from ..common.db import Queryable
from . import cursors
from .announcements import Announcement
from .filters import EVERYTHING, AnnouncementFilter


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a cursor is not walked: :data:`.cursors.EPOCH_CHANGED` or :data:`.cursors.NOT_ISSUED`,
    with the message partners read."""

    code: str
    message: str
    #: The projector's committed positions read with the refused page.
    frontier: dict[int, int]


@dataclass(frozen=True, slots=True)
class Page:
    epoch: str
    #: The projector's committed positions (next offset per partition), read with the page.
    frontier: dict[int, int]
    #: At most the limit's announcements after the cursor, in (offset, partition, locale) order.
    items: list[Announcement]
    #: Whether more announcements follow the page (up to the upper bound, when one was given).
    has_more: bool
    #: The marks the walk started from.
    start: dict[int, cursors.Mark]
    #: The marks after the page: past every item and, when nothing more follows and the walk had
    #: no upper bound, at the frontier.
    marks: dict[int, cursors.Mark]

    def cursor(self) -> str:
        """The cursor after this page."""
        return cursors.encode(self.epoch, self.marks)

    def each(self) -> Iterator[tuple[Announcement, str]]:
        """Every item with the cursor just after it (what a stream message carries)."""
        marks = dict(self.start)
        for item in self.items:
            cursors.advance(marks, item.partition, (item.offset, item.lang))
            yield item, cursors.encode(self.epoch, marks)


async def walk(
    db: Queryable,
    topic: str,
    cursor: cursors.Cursor | None,
    served: Iterable[str],
    *,
    limit: int,
    filter: AnnouncementFilter = EVERYTHING,
    upto: cursors.Cursor | None = None,
    wait_s: float = cursors.AHEAD_WAIT_S,
) -> Page | Refusal:
    """The page after ``cursor`` (None: nothing is read, and the page's cursor is the frontier's),
    at most ``limit`` items, through ``filter``, up to ``upto`` when given (a resume: where its
    connection went live, whose epoch must be the cursor's too). ``served``: the locales the
    service answers in (the filter narrows them)."""
    start = dict(cursor.marks) if cursor is not None else {}
    # Both the cursor and the upper bound must be committed (a failover to an asynchronous
    # standby may have forgotten some of them for a moment: waited for, bounded).
    reach = (
        cursors.Cursor(cursor.epoch, cursors.furthest(cursor.marks, upto.marks if upto is not None else {}))
        if cursor is not None
        else None
    )
    read = await cursors.read_reaching(
        lambda: cursors.read_changes(
            db,
            topic,
            start,
            filter.locales_read(served),
            tickers=filter.tickers,
            categories=filter.categories,
            limit=limit + 1 if cursor is not None else 0,
            upto=upto.marks if upto is not None else None,
        ),
        reach,
        wait_s=wait_s,
    )
    if cursor is not None and (refusal := _refusal(cursor, upto, read)) is not None:
        return refusal
    items = read.items[:limit]
    has_more = len(read.items) > limit
    marks = dict(start)
    if not has_more and upto is None:  # everything committed below the frontier that matches was read
        for partition, next_offset in read.frontier.items():
            cursors.advance(marks, partition, (next_offset, ""))
    for item in items:
        cursors.advance(marks, item.partition, (item.offset, item.lang))
    return Page(read.epoch, read.frontier, items, has_more, start, marks)


def _refusal(cursor: cursors.Cursor, upto: cursors.Cursor | None, read: cursors.Changes) -> Refusal | None:
    """Why ``cursor`` cannot be walked, judged by the epoch and frontier read with the page."""
    if read.epoch != cursor.epoch or (upto is not None and read.epoch != upto.epoch):
        return Refusal(cursors.EPOCH_CHANGED, cursors.EPOCH_CHANGED_MESSAGE, read.frontier)
    if (why := cursors.not_issued(cursor, read.frontier)) is not None:
        return Refusal(cursors.NOT_ISSUED, cursors.NOT_ISSUED_MESSAGE.format(why=why), read.frontier)
    return None
