"""The argument types of the ``tickerwire`` commands: each checks one argument before anything
is contacted, and says what was wrong in the parser's one line (exit status 2)."""

from __future__ import annotations

import argparse
import re
from datetime import datetime


def bounded_int(low: int, high: int):
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range {low}..{high}")
        return value

    return parse


def bounded_text(longest: int):
    def parse(raw: str) -> str:
        if len(raw) > longest:
            raise argparse.ArgumentTypeError(f"{len(raw)} characters; at most {longest}")
        return raw

    return parse


def positive_seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds") from None
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"{raw!r} must be above 0 and below 86400 seconds")
    return value


def aware_timestamp(raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an ISO 8601 timestamp (e.g. 2026-01-01T00:00:00Z)") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{raw!r} needs a UTC offset (e.g. 2026-01-01T00:00:00Z)")
    return value


def matching(pattern: str, what: str):
    def parse(raw: str) -> str:
        if not re.fullmatch(pattern, raw):
            raise argparse.ArgumentTypeError(f"{raw!r} is not a valid {what}")
        return raw

    return parse


def dead_letter_kind(raw: str) -> str:
    from ..projector.metrics import DEAD_LETTER_KINDS  # only when given: the import costs every command 0.7 s

    if raw not in DEAD_LETTER_KINDS:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a reason kind; known: {', '.join(DEAD_LETTER_KINDS)}")
    return raw


#: The event contract's patterns (schemas/models.py), checked before anything is contacted.
entity_id = matching(r"[A-Za-z0-9_\-]{1,100}", "id (1 to 100 letters, digits, _ or -)")
embed_id = matching(r"bdg_[A-Za-z0-9]{4,64}", "embed id (bdg_ then 4 to 64 letters or digits)")
#: A webhook endpoint id, as the event contract has it (schemas/models.py).
webhook_id = matching(r"whe_[A-Za-z0-9]{4,64}", "webhook endpoint id (whe_ then 4 to 64 letters or digits)")
