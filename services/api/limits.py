"""The per-minute rate limit and the daily quota of a workspace, as HTTP sees them.

The counting itself happens in the database (``tw_admit``, platform migration 0003), group-
committed by :mod:`.admission`. This module turns its answer into the headers every
counted response carries and into the two 429 errors (docs/api.md#limit-headers):
X-RateLimit-* and X-Quota-*, and the standard ``RateLimit-Policy`` and ``RateLimit`` fields of
draft-ietf-httpapi-ratelimit-headers-11 (policies ``"minute"`` and ``"day"``).

Windows: the rate limit is a fixed window aligned to the UTC minute (it resets at second 0 of
the next minute, ``X-RateLimit-Reset``); the quota is the UTC day (it resets at the next UTC
midnight, ``X-Quota-Reset``). Both instants are epoch seconds on the database clock.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import asyncpg

from ..common.http.envelope import ApiError

#: Names of the two quota policies in RateLimit-Policy and RateLimit.
MINUTE_POLICY = "minute"
DAY_POLICY = "day"


@functools.lru_cache(maxsize=1024)
def ratelimit_policy(rate_limit: int, quota: int) -> str:
    """``RateLimit-Policy`` (draft-11 section 3): the per-minute and the per-day request quotas.

    ``w`` is the window length in seconds; both windows are fixed (the UTC minute and the UTC
    day), so the RateLimit field's ``t`` tells how much of the current one is left.
    """
    return f'"{MINUTE_POLICY}";q={rate_limit};w=60, "{DAY_POLICY}";q={quota};w=86400'


@functools.lru_cache(maxsize=1024)
def _fixed(rate_limit: int, minute_reset: int, quota: int, day_reset: int) -> tuple[str, str, str, str, str]:
    """The header values that stay the same for a workspace through a minute, formatted once."""
    return str(rate_limit), str(minute_reset), str(quota), str(day_reset), ratelimit_policy(rate_limit, quota)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 4x, once per admitted request
class Usage:
    """One workspace's two windows, as of the admission of a request (database clock). Not
    changed once built."""

    outcome: str
    rate_limit: int
    minute_used: int
    minute_reset: int
    quota: int
    day_used: int
    day_reset: int
    now: float

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> "Usage":
        return cls(
            row["outcome"],
            row["rate_limit"],
            row["minute_used"],
            row["minute_reset"],
            row["quota"],
            row["day_used"],
            row["day_reset"],
            row["db_now"],
        )

    @property
    def admitted(self) -> bool:
        return self.outcome == "OK"

    def headers(self, refused: str | None = None) -> dict[str, str]:
        """The pacing headers; ``refused`` (a 429's code) reports that window as used up."""
        minute_left = 0 if refused == "RATE_LIMITED" else max(0, self.rate_limit - self.minute_used)
        day_left = 0 if refused == "QUOTA_EXHAUSTED" else max(0, self.quota - self.day_used)
        limit, minute_reset, quota, day_reset, policy = _fixed(
            self.rate_limit, self.minute_reset, self.quota, self.day_reset
        )
        return {
            "X-RateLimit-Limit": limit,
            "X-RateLimit-Remaining": str(minute_left),
            "X-RateLimit-Reset": minute_reset,
            "X-Quota-Limit": quota,
            "X-Quota-Remaining": str(day_left),
            "X-Quota-Reset": day_reset,
            # draft-ietf-httpapi-ratelimit-headers-11, sections 3 and 4 (Structured Field lists).
            "RateLimit-Policy": policy,
            "RateLimit": (
                f'"{MINUTE_POLICY}";r={minute_left};t={self.seconds_until(self.minute_reset)}, '
                f'"{DAY_POLICY}";r={day_left};t={self.seconds_until(self.day_reset)}'
            ),
        }

    def seconds_until(self, reset: int) -> int:
        """Whole seconds from now until ``reset``, rounded up, at least 1."""
        return max(1, math.ceil(reset - self.now))


def refusal(usage: Usage) -> ApiError:
    """The 429 for a request the limits refused (it was not counted)."""
    headers = usage.headers(refused=usage.outcome)
    if usage.outcome == "RATE_LIMITED":
        retry = usage.seconds_until(usage.minute_reset)
        message = (
            f"Rate limit of {usage.rate_limit} requests per minute reached for this workspace; "
            f"retry after {retry} s (the window resets at the start of the next UTC minute)."
        )
        code = "RATE_LIMITED"
    else:
        retry = usage.seconds_until(usage.day_reset)
        message = (
            f"Daily quota of {usage.quota} requests used up for this workspace; "
            f"it resets at the next UTC midnight, in {retry} s."
        )
        code = "QUOTA_EXHAUSTED"
    headers["Retry-After"] = str(retry)
    return ApiError(429, code, message, retry_after_sec=retry, headers=headers)
