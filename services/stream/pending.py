"""A posts-topic record read by the feed and waiting for the projector to commit it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pending:
    partition: int
    offset: int
    post_id: int
    arrived: float
