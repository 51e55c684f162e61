"""Bounded, ``Retry-After``-aware retries and capped, jittered back-off. Pure logic."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When an HTTP call is tried again.

    429 and 503 are retried after the server's ``Retry-After`` (else a jittered back-off);
    connection errors and timeouts after a jittered back-off. A call gives up (raising the
    last error) after ``max_attempts`` tries, as soon as the next wait would push the total
    waited beyond ``max_total_wait`` seconds (a daily ``QUOTA_EXHAUSTED`` with hours to wait
    is raised at once rather than slept on), or when ``max_call_time`` seconds have passed
    since the call began: every attempt's own timeout (the client's ``timeout``) is cut to
    what is left of it, so no call takes longer, whatever the server does.
    ``RetryPolicy(max_attempts=1)`` never retries.
    """

    max_attempts: int = 4
    max_total_wait: float = 30.0
    max_call_time: float = 30.0
    retry_statuses: frozenset[int] = frozenset({429, 503})
    retry_connection_errors: bool = True
    backoff_base: float = 0.25
    backoff_cap: float = 5.0

    def delay(self, attempt: int, retry_after: float | None, waited: float) -> float | None:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1), or None to give up."""
        if attempt >= self.max_attempts:
            return None
        wait = retry_after if retry_after is not None else full_jitter(attempt, self.backoff_base, self.backoff_cap)
        if waited + wait > self.max_total_wait:
            return None
        return wait


def full_jitter(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Capped exponential back-off with full jitter: uniform in [0, min(cap, base * 2^(attempt-1))]."""
    ceiling = min(cap, base * (2 ** max(attempt - 1, 0)))
    return (rng or random).uniform(0, ceiling)


@dataclass
class Backoff:
    """Reconnect delays for the stream: capped, jittered, reset after a healthy connection."""

    base: float = 0.5
    cap: float = 30.0
    attempt: int = 0

    def next(self) -> float:
        self.attempt += 1
        # "Equal jitter": never zero, so a crash loop cannot hammer the server.
        ceiling = min(self.cap, self.base * 2.0 ** (self.attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempt = 0
