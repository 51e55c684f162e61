"""The log position: how far the read model reflects the posts topic, in partners' terms.

A :class:`LogPosition` holds, per partition of the posts topic, the next offset the projector
applies there: the ``X-Log-Position`` of a response, the ``X-Min-Log-Position`` a client sends
back, and what a replica's data reflects. Its text is ``"<partition>:<next offset>"`` pairs,
ascending by partition, comma-separated (``""``: nothing is projected yet). A pushed post's
``log_position`` names its record instead (``"<partition>:<offset>"``, :func:`record_text`):
a read reflects that post once its position covers :meth:`LogPosition.reflecting` it, the
record's offset plus one (docs/api.md#log-positions).

The database writes the positions read in a statement's own snapshot as JSON pairs
(:func:`stored_sql`); :meth:`LogPosition.stored` reads them. This module is the only place
that writes or reads the text form.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping, TypeVar

import orjson

K = TypeVar("K")

#: Partitions and offsets a position may name (9 and 18 digits: what a partition count and a
#: Kafka offset can be).
_MAX_PARTITION_DIGITS, _MAX_OFFSET_DIGITS = 9, 18


def covers(have: Mapping[K, int], want: Mapping[K, int]) -> bool:
    """Whether positions ``have`` reflect everything ``want`` does: every partition at or past
    its mark (a partition ``have`` does not name is at 0). The one statement of that rule."""
    return all(have.get(key, 0) >= mark for key, mark in want.items())


@dataclass(frozen=True, slots=True)
class LogPosition:
    """The next offset to apply per partition of the posts topic."""

    #: (partition, next offset), ascending by partition.
    pairs: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, marks: Mapping[int, int]) -> LogPosition:
        return cls(tuple(sorted(marks.items())))

    @classmethod
    def reflecting(cls, partition: int, offset: int) -> LogPosition:
        """What a read must cover to reflect the record at ``offset`` of ``partition``."""
        return cls(((partition, offset + 1),))

    @classmethod
    def parse(cls, text: str) -> LogPosition:
        """The position a client sent (``X-Min-Log-Position``); ``ValueError`` when it is not one.
        A partition named twice keeps its furthest offset."""
        marks: dict[int, int] = {}
        if text.strip() == "":
            return cls()
        for part in text.split(","):
            partition, colon, offset = part.strip().partition(":")
            if (
                not colon
                or not (partition.isascii() and partition.isdigit() and offset.isascii() and offset.isdigit())
                or len(partition) > _MAX_PARTITION_DIGITS
                or len(offset) > _MAX_OFFSET_DIGITS
            ):
                raise ValueError(f"expected partition:offset pairs separated by commas, got {text[:100]!r}")
            marks[int(partition)] = max(marks.get(int(partition), 0), int(offset))
        return cls.of(marks)

    @classmethod
    def stored(cls, text: str | None) -> LogPosition:
        """The position :func:`stored_sql` read (JSON pairs; None or ``[]``: nothing stored)."""
        return cls(tuple((int(p), int(o)) for p, o in orjson.loads(text))) if text else cls()

    def text(self) -> str:
        """The header form: ``"0:12,1:40"``."""
        return _text(self.pairs)

    def marks(self) -> dict[int, int]:
        return dict(self.pairs)

    def covers(self, other: LogPosition) -> bool:
        """Whether data at this position reflects everything data at ``other`` does."""
        return covers(self.marks(), other.marks())

    def __bool__(self) -> bool:
        return bool(self.pairs)


def record_text(partition: int, offset: int) -> str:
    """A pushed post's ``log_position``: its record, ``"<partition>:<offset>"``."""
    return _pair(partition, offset)


@functools.lru_cache(maxsize=256)
def _text(pairs: tuple[tuple[int, int], ...]) -> str:
    """The header form of ``pairs``, formatted once per position: every response of a page served
    from memory carries the same one."""
    return ",".join(_pair(p, o) for p, o in pairs)


def _pair(partition: int, offset: int) -> str:
    """``"<partition>:<offset>"``: the one place the text form is written."""
    return f"{partition}:{offset}"


# The positions of the posts topic ({topic}: the parameter holding it) as JSON pairs
# [[partition, next offset], ...] ascending, '[]' while none is stored: read inside the
# statement whose snapshot a response reflects.
_STORED = (
    "(SELECT COALESCE(json_agg(json_build_array(p.partition, p.next_offset) ORDER BY p.partition)::text, '[]') "
    "FROM positions p WHERE p.topic = {topic}::text)"
)


def stored_sql(topic_ref: str) -> str:
    """The posts topic's stored positions as an SQL expression (text), for :meth:`LogPosition.stored`;
    ``topic_ref`` is the parameter holding the topic (``$2``)."""
    return _STORED.format(topic=topic_ref)
