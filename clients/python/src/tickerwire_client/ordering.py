"""What the application sees of one locale: every post once, in the API's order.

Pure logic, no I/O: the stream session feeds it pushes (``push``) and gap-fill pages
(``begin_fill`` / ``fill_page`` / ``end_fill``) and hands what it returns to the application.

- **Once**: a post id already delivered (or waiting) is dropped as a duplicate.
- **In order**: the stream announces posts in the order the projector commits them, which
  across the topic's partitions can differ from the API's order (``published_at``, then
  ``id``) by a batch. So a push waits ``window`` seconds and is then released together with
  every waiting post that sorts before it, in order. While a gap-fill runs, pushes wait
  for it; gap-fill pages are authoritative and delivered oldest first.
- **Never lost**: a post that arrives after a newer one was released (for example a
  translation added to an older post) is still delivered, marked ``late``.
- The **cursor** for the next gap-fill is the id of the newest post delivered in order
  (or the starting cursor), so a gap-fill ``after=<cursor>`` covers every post not yet seen.
  A gap-fill that is interrupted (refused for the rate limit, or its connection lost) is
  *owed*: the next one resumes from where it had read to (``fill_cursor``), not from the
  newest post delivered meanwhile by pushes, so the rest of the gap is still read.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from .meta import LogMark, LogPosition
from .models import PostLean

Source = Literal["stream", "gap_fill"]


@dataclass(frozen=True, slots=True)
class StreamPost:
    """One post as the application receives it."""

    post: PostLean
    #: ``"stream"`` (a push) or ``"gap_fill"`` (read with ``after=<cursor>`` after a (re)connect).
    source: Source
    #: For pushes: where the announcing event sits in the log (``log_position`` of the message), if sent.
    log_mark: LogMark | None = None
    #: True when a post sorting before an already delivered one arrived later (never dropped).
    late: bool = False


@dataclass(slots=True)
class Counters:
    delivered: int = 0
    from_stream: int = 0
    from_gap_fill: int = 0
    duplicates_dropped: int = 0
    late: int = 0


@dataclass(slots=True)
class _Held:
    post: PostLean
    mark: LogMark | None
    arrived: float


@dataclass
class LocaleLine:
    lang: str
    #: Id to gap-fill after when nothing has been delivered yet (None: from the very first post).
    cursor: int | None = None
    window: float = 0.5
    seen_capacity: int = 10_000
    max_held: int = 10_000
    counters: Counters = field(default_factory=Counters)
    last_key: tuple[datetime, int] | None = None
    filling: bool = False
    #: Where the owed gap-fill has read to (the ``after`` of its next page), while one is owed.
    fill_cursor: int | str | None = None
    fill_owed: bool = False
    _held: dict[int, _Held] = field(default_factory=dict)
    _seen: collections.OrderedDict[int, None] = field(default_factory=collections.OrderedDict)

    # ------------------------------------------------------------------ pushes

    def push(self, post: PostLean, mark: LogMark | None, now: float) -> list[StreamPost]:
        if post.id in self._seen or post.id in self._held:
            self.counters.duplicates_dropped += 1
            return []
        self._held[post.id] = _Held(post, mark, now)
        if len(self._held) > self.max_held:  # bounded: release the oldest early rather than grow
            return self._release_upto(min(h.post.order_key for h in self._held.values()))
        return self.release(now)

    def release(self, now: float) -> list[StreamPost]:
        """Pushes whose window has passed, with every waiting post that sorts before them."""
        if self.filling or not self._held:
            return []
        due = [h.post.order_key for h in self._held.values() if now - h.arrived >= self.window]
        return self._release_upto(max(due)) if due else []

    def next_due(self) -> float | None:
        """When the oldest waiting push is due (loop time), or None."""
        if self.filling or not self._held:
            return None
        return min(h.arrived for h in self._held.values()) + self.window

    @property
    def waiting(self) -> int:
        return len(self._held)

    def _release_upto(self, top: tuple[datetime, int]) -> list[StreamPost]:
        out = sorted((h for h in self._held.values() if h.post.order_key <= top), key=lambda h: h.post.order_key)
        for h in out:
            del self._held[h.post.id]
        return [self._deliver(h.post, "stream", h.mark) for h in out]

    # ------------------------------------------------------------------ gap-fill

    def begin_fill(self) -> int | str | None:
        """A gap-fill starts (or resumes): pushes wait for it. Returns the cursor to fill after:
        where an interrupted gap-fill had read to, else the newest post delivered in order."""
        self.filling = True
        if not self.fill_owed:
            self.fill_owed, self.fill_cursor = True, self.cursor
        return self.fill_cursor

    def fill_progress(self, after: int | str) -> None:
        """The gap-fill has delivered every post up to ``after`` (its next page starts there)."""
        self.fill_cursor = after

    def postpone(self, seconds: float) -> None:
        """The stream was not read for ``seconds`` (the application's queue was full): frames
        may be waiting in the socket, so no waiting push is due earlier for it."""
        for held in self._held.values():
            held.arrived += seconds

    def fill_page(self, posts_newest_first: list[PostLean]) -> list[StreamPost]:
        """One page of ``GET /posts?after=<cursor>``; delivered oldest first, duplicates dropped."""
        out = []
        for post in sorted(posts_newest_first, key=lambda p: p.order_key):
            held = self._held.pop(post.id, None)
            if post.id in self._seen:
                self.counters.duplicates_dropped += 1
                continue
            if held is not None:  # the push of this post was waiting: that copy is now a duplicate
                self.counters.duplicates_dropped += 1
            out.append(self._deliver(post, "gap_fill", None))
        return out

    def end_fill(self, position: LogPosition | None, now: float) -> list[StreamPost]:
        """The gap-fill read an empty (or final) page at ``position``.

        A waiting push whose event that read already reflected (``position`` covers its
        mark) was committed before the read, so every post before it has been delivered:
        it is released at once instead of waiting out its window.
        """
        self.filling = False
        self.fill_owed, self.fill_cursor = False, None
        out: list[StreamPost] = []
        if position is not None:
            covered = [h.post.order_key for h in self._held.values() if h.mark is not None and position.covers(h.mark)]
            if covered:
                out = self._release_upto(max(covered))
        return out + self.release(now)

    def abort_fill(self) -> None:
        """The gap-fill stopped before its end (refused, or its connection lost): pushes flow
        again, and the fill stays owed from where it had read to."""
        self.filling = False

    # ------------------------------------------------------------------ delivery

    def _deliver(self, post: PostLean, source: Source, mark: LogMark | None) -> StreamPost:
        late = self.last_key is not None and post.order_key < self.last_key
        self._seen[post.id] = None
        if len(self._seen) > self.seen_capacity:
            self._seen.popitem(last=False)
        c = self.counters
        c.delivered += 1
        if source == "stream":
            c.from_stream += 1
        else:
            c.from_gap_fill += 1
        if late:
            c.late += 1
        else:
            self.last_key = post.order_key
            self.cursor = post.id
        return StreamPost(post, source, mark, late)
