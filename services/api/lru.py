"""The one bounded least-recently-used map of the read API's in-memory caches (the page cache,
the gzip bodies, the parsed query strings): bounded by entries and by the total size of its
values, the least recently used dropped first; a value larger than the whole budget is not kept."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class BoundedLRU(Generic[V]):
    def __init__(self, size: Callable[[V], int], *, max_entries: int, max_bytes: int) -> None:
        self._sizeof = size
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._size = 0
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def get(self, key: Hashable) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> None:
        size = self._sizeof(value)
        if size > self._max_bytes:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self._size -= self._sizeof(old)
        self._items[key] = value
        self._size += size
        while len(self._items) > self._max_entries or self._size > self._max_bytes:
            _, dropped = self._items.popitem(last=False)
            self._size -= self._sizeof(dropped)

    def clear(self) -> None:
        self._items.clear()
        self._size = 0
