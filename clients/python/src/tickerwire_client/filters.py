"""The filters of ``GET /posts`` and ``GET /search``, as one typed object. Pure logic.

``PostFilter`` is a frozen value: build it once, pass it to ``posts``, ``search``,
``iter_posts`` or ``iter_search`` (``where=``), keep it, derive others with
``dataclasses.replace``. The same fields are accepted as keywords (``ticker="BTC"``), typed
by ``PostFilterArgs``; a keyword given next to ``where`` overrides that field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Sequence, TypedDict

#: A CSV filter: one value, several (joined with commas), or none.
CSV = str | Sequence[str] | None


def csv_value(value: str | Iterable[str] | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return ",".join(str(v) for v in value)


class PostFilterArgs(TypedDict, total=False):
    """The :class:`PostFilter` fields as keyword arguments (``client.posts(ticker="BTC")``)."""

    category: CSV
    ticker: CSV
    hashtag: CSV
    sentiment: CSV
    importance_min: int | None
    since: datetime | str | None


@dataclass(frozen=True, slots=True)
class PostFilter:
    """What ``GET /posts`` and ``GET /search`` narrow by; every field is optional.

    CSV fields take a string or a sequence (``sentiment=[Sentiment.BULLISH, "NEUTRAL"]``);
    a post matches a field when it matches any of its values, and every field given.
    ``since`` is a timezone-aware ``datetime`` or an ISO 8601 string.
    """

    category: CSV = None
    ticker: CSV = None
    hashtag: CSV = None
    sentiment: CSV = None
    importance_min: int | None = None
    since: datetime | str | None = None

    def params(self) -> dict[str, str]:
        """The query parameters, CSV-joined, unset fields left out."""
        params = {
            "category": csv_value(self.category),
            "ticker": csv_value(self.ticker),
            "hashtag": csv_value(self.hashtag),
            "sentiment": csv_value(self.sentiment),
            "importance_min": None if self.importance_min is None else str(self.importance_min),
            "since": self.since.isoformat() if isinstance(self.since, datetime) else self.since,
        }
        return {k: v for k, v in params.items() if v is not None}

    @classmethod
    def of(cls, where: PostFilter | None, keywords: PostFilterArgs) -> PostFilter:
        """``where`` with the fields given as ``keywords`` replaced by them."""
        return dataclasses.replace(where or cls(), **keywords)


def page_params(
    lang: str | None = None, limit: int | None = None, after: int | str | None = None, before: int | str | None = None
) -> dict[str, str]:
    """The locale and paging parameters, ``None`` left out."""
    params = {"lang": lang, "limit": limit, "after": after, "before": before}
    return {k: str(v) for k, v in params.items() if v is not None}
