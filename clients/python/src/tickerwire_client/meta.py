"""What a response says besides its body: the limit headers and the consistency mark.

Pure parsing, no I/O. Every field is optional: a header the server does not send (an older
server, or a response that is not counted) is ``None``, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True, slots=True)
class LogMark:
    """Where one stream message's announcing event sits in the posts topic (``"partition:offset"``)."""

    partition: int
    offset: int

    @classmethod
    def parse(cls, value: object) -> LogMark | None:
        if not isinstance(value, str):
            return None
        partition, sep, offset = value.partition(":")
        if not sep:
            return None
        try:
            return cls(int(partition), int(offset))
        except ValueError:
            return None

    def reflected_from(self) -> dict[int, int]:
        """The ``X-Log-Position`` offsets from which a read reflects this event: the next one after
        it (docs/api.md#log-positions), as ``X-Min-Log-Position`` takes them."""
        return {self.partition: self.offset + 1}

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"


@dataclass(frozen=True, slots=True)
class LogPosition:
    """The projector position an HTTP read reflects (header ``X-Log-Position``,
    ``"0:1523,1:1490"``): per partition, the next offset the projector will project."""

    offsets: Mapping[int, int]

    @classmethod
    def parse(cls, value: str | None) -> LogPosition | None:
        if not value:
            return None
        offsets: dict[int, int] = {}
        for item in value.split(","):
            mark = LogMark.parse(item.strip())
            if mark is None:
                return None  # a malformed header is treated as absent, never half-read
            offsets[mark.partition] = mark.offset
        return cls(offsets) if offsets else None

    def covers(self, mark: LogMark) -> bool:
        """True when a read at this position already reflects the event at ``mark``."""
        return self.offsets.get(mark.partition, 0) > mark.offset

    def __str__(self) -> str:
        return ",".join(f"{p}:{o}" for p, o in sorted(self.offsets.items()))


def _int(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` as seconds (delta-seconds form; an HTTP date is treated as absent)."""
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return max(seconds, 0.0)


@dataclass(frozen=True, slots=True)
class Limits:
    """The rate-limit and quota headers of one response (docs/api.md#limit-headers): epoch seconds for resets."""

    rate_limit: int | None = None
    rate_remaining: int | None = None
    rate_reset: int | None = None
    quota_limit: int | None = None
    quota_remaining: int | None = None
    quota_reset: int | None = None
    retry_after: float | None = None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Limits:
        return cls(
            rate_limit=_int(headers, "X-RateLimit-Limit"),
            rate_remaining=_int(headers, "X-RateLimit-Remaining"),
            rate_reset=_int(headers, "X-RateLimit-Reset"),
            quota_limit=_int(headers, "X-Quota-Limit"),
            quota_remaining=_int(headers, "X-Quota-Remaining"),
            quota_reset=_int(headers, "X-Quota-Reset"),
            retry_after=retry_after_seconds(headers),
        )


@dataclass(frozen=True, slots=True)
class ResponseMeta:
    """Status, limits, consistency mark and raw headers of one HTTP response."""

    status: int
    limits: Limits
    log_position: LogPosition | None = None
    etag: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_headers(cls, status: int, headers: Mapping[str, str]) -> ResponseMeta:
        return cls(
            status=status,
            limits=Limits.from_headers(headers),
            log_position=LogPosition.parse(headers.get("X-Log-Position")),
            etag=headers.get("ETag"),
            headers=headers,
        )
