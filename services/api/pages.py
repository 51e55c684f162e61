"""Hot pages from memory: serialized bodies of /posts pages and post details.

Entries are keyed by everything the body depends on (endpoint, resolved locale, parsed filters
and cursors, the search's text configuration and normalized terms, or the detail's id/slug segment) and hold the exact bytes the handler built, their
entity tag and the consistency mark read in the same statement as their data, so a hit answers
byte for byte what a fresh query of that snapshot gives, and its X-Log-Position never claims more
than the body reflects.

Invalidation: the cache belongs to one *generation* of the stamps it depends on (``posts``, bumped
by the projector whenever a post row changes; ``categories`` and ``locales``, whose changes
re-render posts). When the process's change-stamp refresh sees any of them move, every entry is
dropped. A body is stored only under the generation current when its query started, so a page
read before a change is never kept past it. While the stamps are not confirmed current (the
database unreachable) the cache is bypassed; a ``posts`` change already pushed to the process
makes lookups wait (bounded) for the refresh that applies it. ``after=`` pages (the stream's
gap-fill, which must see a post as soon as it is announced) always read the database.
Bounded by entries and bytes, least recently used dropped first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping

from ..readmodel import stamps as stamp
from ..readmodel.logposition import LogPosition
from .lru import BoundedLRU

DEPENDS_ON = (stamp.POSTS, stamp.CATEGORIES, stamp.LOCALES)


@dataclass(frozen=True, slots=True)
class CachedPage:
    body: bytes
    etag: str
    log_position: LogPosition


def _size(page: CachedPage) -> int:
    return len(page.body)


class PageCache:
    def __init__(self, max_entries: int = 4096, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._items: BoundedLRU[CachedPage] = BoundedLRU(_size, max_entries=max_entries, max_bytes=max_bytes)
        self.generation: tuple | None = None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def observe(self, stamps: Mapping[str, int]) -> None:
        """Called with the stamps of every refresh: drop everything when a dependency moved."""
        generation = tuple(stamps.get(n) for n in DEPENDS_ON)
        if generation != self.generation:
            self._items.clear()
            self.generation = generation

    def get(self, key: Hashable) -> CachedPage | None:
        page = self._items.get(key)
        if page is None:
            self.misses += 1
            return None
        self.hits += 1
        return page

    def bypass(self) -> None:
        """A page built without looking here (the stamps not confirmed current): counted as a miss."""
        self.misses += 1

    def counts(self) -> dict[str, float]:
        return {"hit": self.hits, "miss": self.misses}

    def put(self, key: Hashable, page: CachedPage, generation: tuple | None) -> None:
        """Store ``page`` if no refresh moved the generation since its query began."""
        if generation is not None and generation == self.generation:
            self._items.put(key, page)
