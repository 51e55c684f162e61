"""Pure derivations of the projector: how one post change moves the derived counters.

A post contributes +1 to ``post_count`` of each ticker while it is live (docs/api.md#post-count), and +1 to
one sentiment bucket (minute of published_at, sentiment) while it is visible. A change of
status, tickers, sentiment or published_at moves those contributions; these functions say how.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from tickerwire.schemas.models import LIVE_STATUSES, PostStatus

from ..readmodel.mapping import visible_state


@dataclass(frozen=True, slots=True)
class PostFacts:
    """What the derived counters need to know about one version of a post."""

    status: str
    published_at: datetime | None
    sentiment: str
    tickers: tuple[str, ...]

    @property
    def live(self) -> bool:
        return PostStatus(self.status) in LIVE_STATUSES

    @property
    def visible(self) -> bool:
        return visible_state(PostStatus(self.status), self.published_at)


def minute_bucket(ts: datetime) -> datetime:
    return ts.astimezone(timezone.utc).replace(second=0, microsecond=0)


def ticker_contribution(facts: PostFacts | None) -> Counter[str]:
    if facts is None or not facts.live:
        return Counter()
    return Counter(set(facts.tickers))


def sentiment_contribution(facts: PostFacts | None) -> Counter[tuple[datetime, str]]:
    if facts is None or not facts.visible:
        return Counter()
    assert facts.published_at is not None
    return Counter({(minute_bucket(facts.published_at), facts.sentiment): 1})


def _delta(old: Counter, new: Counter) -> dict:
    out = dict(new)
    for key, n in old.items():
        out[key] = out.get(key, 0) - n
    return {k: v for k, v in out.items() if v}


def ticker_deltas(old: PostFacts | None, new: PostFacts | None) -> dict[str, int]:
    """Per-ticker change of post_count when a post moves from ``old`` to ``new``."""
    return _delta(ticker_contribution(old), ticker_contribution(new))


def sentiment_deltas(old: PostFacts | None, new: PostFacts | None) -> dict[tuple[datetime, str], int]:
    """Per-(minute, sentiment) change of the pulse counters when a post moves."""
    return _delta(sentiment_contribution(old), sentiment_contribution(new))


def merge(into: dict, delta: dict) -> None:
    for key, n in delta.items():
        total = into.get(key, 0) + n
        if total:
            into[key] = total
        else:
            into.pop(key, None)


@dataclass(slots=True)
class CounterDeltas:
    """The batch's net changes of the derived counters, written by ``sql.FINISH_BATCH``."""

    tickers: dict[str, int] = field(default_factory=dict)
    sentiment: dict[tuple[datetime, str], int] = field(default_factory=dict)

    def columns(self) -> tuple[list, list, list, list, list]:
        """Sorted, so that concurrent writers lock shared counter rows in one order."""
        tickers, buckets = sorted(self.tickers.items()), sorted(self.sentiment.items())
        return (
            [t for t, _ in tickers],
            [n for _, n in tickers],
            [b for (b, _), _ in buckets],
            [s for (_, s), _ in buckets],
            [n for _, n in buckets],
        )
