"""Query-string grammar shared by the read API and the stream (pure, no I/O).

A CSV parameter takes at most 20 comma-separated items (the OpenAPI ``maxItems``; empty and
repeated items count, as they do there): empty items are skipped, a repeated value is taken
once, and a parameter with no value left is "not given". A value longer than 100 characters
names nothing stored (no slug, ticker, hashtag or locale is that long), so it is kept as a
value that matches nothing: an unknown value silently matches nothing, as docs/api.md#posts-and-pagination
says of slugs and tickers. ``/posts`` and ``/search`` use it for ``category``, ``ticker``,
``hashtag`` and ``sentiment``; the stream for its opt-in filters ``lang``, ``tickers`` and
``categories``. More than 20 items raise :class:`InvalidParameter`, which each service turns
into its 422 ``VALIDATION_FAILED`` envelope with ``field`` naming the parameter.
"""

from __future__ import annotations

from ..runtime.errors import InvalidParameter

#: The OpenAPI document's ``maxItems`` of every CSV parameter.
MAX_CSV_VALUES = 20
MAX_CSV_VALUE_LENGTH = 100


def csv_values(raw: str | None, name: str) -> tuple[str, ...] | None:
    """The values of one CSV parameter, or None when it is absent or holds no value."""
    if raw is None:
        return None
    items = raw.split(",")
    if len(items) > MAX_CSV_VALUES:
        raise InvalidParameter(name, f"{name} takes at most {MAX_CSV_VALUES} comma-separated items; got {len(items)}.")
    values = tuple(dict.fromkeys(v for v in items if v))
    if not values:
        return None
    # A value with a NUL or over the length bound can match nothing stored; "" never matches
    # either, is safe to send to PostgreSQL, and keeps what is compared (and cached) small.
    return tuple(dict.fromkeys("" if len(v) > MAX_CSV_VALUE_LENGTH or "\x00" in v else v for v in values))


def tickers(raw: str | None, name: str) -> tuple[str, ...] | None:
    """A CSV of ticker symbols, compared upper-case. Tickers are ASCII: a value that is not
    matches nothing (Unicode upper-casing would alias ``ınj`` to ``INJ``)."""
    values = csv_values(raw, name)
    return tuple(dict.fromkeys(t.upper() if t.isascii() else "" for t in values)) if values is not None else None


def bcp47_case(tag: str) -> str:
    """A language tag in the case BCP 47 recommends (RFC 5646 2.1.1: tags are case-insensitive):
    the language lower-case, a four-letter script title-case, a two-letter region upper-case;
    ``de-de`` and ``DE-DE`` are ``de-DE``. The supported locales are stored so."""
    parts = tag.split("-")
    out = [parts[0].lower()]
    for part in parts[1:]:
        if len(part) == 2:
            out.append(part.upper())
        elif len(part) == 4 and part.isalpha():
            out.append(part.title())
        else:
            out.append(part.lower())
    return "-".join(out)
