"""Query-string grammar shared by the read API and the stream (pure, no I/O).

A CSV parameter takes comma-separated values: empty items are skipped, a parameter with no
value left is "not given", at most 20 values of at most 100 characters each. ``/posts`` and
``/search`` use it for ``category``, ``ticker``, ``hashtag`` and ``sentiment``; the stream
for its opt-in filters ``lang``, ``tickers`` and ``categories``. A value that breaks the
grammar raises :class:`InvalidParameter`, which each service turns into its 422
``VALIDATION_FAILED`` envelope with ``field`` naming the parameter.
"""

from __future__ import annotations

from .errors import InvalidParameter

MAX_CSV_VALUES = 20
MAX_CSV_VALUE_LENGTH = 100


def csv_values(raw: str | None, name: str) -> tuple[str, ...] | None:
    """The values of one CSV parameter, or None when it is absent or holds no value."""
    if raw is None:
        return None
    values = tuple(v for v in raw.split(",") if v)
    if not values:
        return None
    if len(values) > MAX_CSV_VALUES:
        raise InvalidParameter(name, f"{name} takes at most {MAX_CSV_VALUES} comma-separated values; got {len(values)}.")
    for v in values:
        if len(v) > MAX_CSV_VALUE_LENGTH:
            raise InvalidParameter(name, f"each {name} value is at most {MAX_CSV_VALUE_LENGTH} characters long.")
    # A value with a NUL can match nothing stored; "" never matches either and is safe to send to PostgreSQL.
    return tuple("" if "\x00" in v else v for v in values)


def tickers(raw: str | None, name: str) -> tuple[str, ...] | None:
    """A CSV of ticker symbols, compared upper-case."""
    values = csv_values(raw, name)
    return tuple(t.upper() for t in values) if values is not None else None
