"""Opt-in stream filters (``lang``, ``tickers``, ``categories`` on the stream URL).

Without any of them a connection receives everything, as docs/api.md#stream says. Each
takes the CSV grammar of the ``/posts`` filters (``services/common/http/querystring.py``: empty items
skipped, repeats counted once, at most 20 distinct values; a value over 100 characters matches
nothing); more values refuse the handshake with 422 VALIDATION_FAILED before the upgrade. Semantics are those of ``/posts``:
OR within a parameter, AND between parameters; ``tickers`` compare upper-case; a group
category slug matches posts in any of its leaves; unknown values match nothing. ``lang``
is a list of locale codes matched case-insensitively, as BCP 47 says, but otherwise exactly (no
fallback to the default locale, unlike the ``lang`` of HTTP reads, which picks one locale to
render).

Connections with equal filters share one :class:`StreamFilter` value, so the hub decides
once per message and distinct filter set, not once per connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from ..common.http.querystring import bcp47_case, csv_values, tickers


@dataclass(frozen=True, slots=True)
class FilterFacts:
    """What a :class:`StreamFilter` looks at, from the announced translation's row."""

    lang: str  # in BCP 47 case, like a filter's langs: tags compare case-insensitively
    tickers: frozenset[str]
    categories: frozenset[str]  # leaf and group slugs, as the /posts category filter sees them

    @classmethod
    def of(cls, lang: str, tickers: Iterable[str], categories: Iterable[str]) -> "FilterFacts":
        """The facts of an announced translation; its ``lang`` as published (``pt-br`` is
        matched by a filter's ``pt-BR``, as /posts matches it)."""
        return cls(bcp47_case(lang), frozenset(tickers), frozenset(categories))


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """None means "not given" (no restriction)."""

    langs: frozenset[str] | None = None
    tickers: frozenset[str] | None = None
    categories: frozenset[str] | None = None

    def admits(self, post: FilterFacts) -> bool:
        return (
            (self.langs is None or post.lang in self.langs)
            and (self.tickers is None or not self.tickers.isdisjoint(post.tickers))
            and (self.categories is None or not self.categories.isdisjoint(post.categories))
        )


EVERYTHING = StreamFilter()


def _set(values: tuple[str, ...] | None) -> frozenset[str] | None:
    return frozenset(values) if values is not None else None


def _cased(values: tuple[str, ...] | None) -> tuple[str, ...] | None:
    return tuple(bcp47_case(v) for v in values) if values is not None else None


def parse_filter(query: Mapping[str, str]) -> StreamFilter:
    """The filter of a stream URL; raises ``InvalidParameter`` for a value breaking the grammar."""
    return StreamFilter(
        langs=_set(_cased(csv_values(query.get("lang"), "lang"))),
        tickers=_set(tickers(query.get("tickers"), "tickers")),
        categories=_set(csv_values(query.get("categories"), "categories")),
    )
