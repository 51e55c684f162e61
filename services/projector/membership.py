"""Where a projector's consumer stands in its consumer group: joining since when, or joined."""

from __future__ import annotations

import time

from .metrics import ProjectorMetrics


class Membership:
    """Where this projector's consumer stands in its group: joining since when, or joined.

    A join that does not complete (a group coordinator that never answers, a broker paused, a
    wedged rebalance) fetches nothing and raises nothing: aiokafka keeps trying in the
    background while every fetch returns empty. This makes it a stall like any other."""

    def __init__(self, metrics: ProjectorMetrics) -> None:
        self.since: float | None = None
        metrics.group_joining.set_function(self.joining_for)

    def joining(self) -> None:
        if self.since is None:
            self.since = time.monotonic()

    def new_consumer(self) -> None:
        """A new consumer starts its join now (a replaced one's time is not held against it)."""
        self.since = time.monotonic()

    def joined(self) -> None:
        self.since = None

    def joining_for(self) -> float:
        return 0.0 if self.since is None else time.monotonic() - self.since
