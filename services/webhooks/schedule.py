"""When a failed delivery is tried again, and what an answer means (docs/webhooks.md#retries):
pure functions, no I/O.

The schedule after the first attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then every
10 h, each delay times ``TICKERWIRE_WEBHOOKS_RETRY_SCALE`` (tests compress it). A 429 or 503
with ``Retry-After`` is tried again when it says (at most an hour later, and never sooner than
the first retry's delay), the other failures by the schedule. 410 Gone disables the endpoint at once. An endpoint
failing for longer than ``TICKERWIRE_WEBHOOKS_DISABLE_AFTER_S`` (times the scale) is disabled.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from typing import Literal

#: The delay before attempt n + 1 after attempt n failed (n = 1, 2, ...); the last one repeats.
RETRY_DELAYS_S = (5.0, 300.0, 1_800.0, 7_200.0, 18_000.0, 36_000.0, 36_000.0)
#: The longest ``Retry-After`` honoured.
MAX_RETRY_AFTER_S = 3_600.0

Outcome = Literal["delivered", "failed", "gone", "refused"]


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt came to."""

    outcome: Outcome
    #: The HTTP status, when a response came.
    status: int | None
    latency_s: float
    #: Why it failed (status line, timeout, reset, refused address), short; None when delivered.
    error: str | None = None
    #: A 429's or 503's ``Retry-After``, in seconds, when it had a valid one.
    retry_after_s: float | None = None
    #: The start of the response's body (:data:`.sender.EXCERPT_BYTES` at most, UTF-8 decoded with
    #: replacement); None when no response came.
    excerpt: str | None = None


def outcome_of(status: int) -> Outcome:
    """2xx delivered; 410 gone; anything else (3xx included: redirects are not followed) failed."""
    if 200 <= status < 300:
        return "delivered"
    if status == 410:
        return "gone"
    return "failed"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date); None when absent or invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def next_delay(failed_attempts: int, scale: float, retry_after_s: float | None = None) -> float:
    """Seconds until the next attempt after ``failed_attempts`` (>= 1) attempts of one message failed."""
    if retry_after_s is not None:  # what the endpoint asked for, never sooner than the first retry
        return max(min(retry_after_s, MAX_RETRY_AFTER_S), RETRY_DELAYS_S[0] * scale)
    return RETRY_DELAYS_S[min(failed_attempts, len(RETRY_DELAYS_S)) - 1] * scale


def due_to_disable(failing_for_s: float, disable_after_s: float, scale: float) -> bool:
    """Whether an endpoint failing for ``failing_for_s`` is disabled now."""
    return failing_for_s >= disable_after_s * scale
