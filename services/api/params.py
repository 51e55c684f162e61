"""Query parameters of the partner endpoints, decoded once at the edge.

Every rule here is written into ``schemas/openapi.json``; a value the document calls
invalid gets ``422 VALIDATION_FAILED`` with ``field`` naming the parameter, and every
value it calls valid is accepted. Unknown parameters are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Mapping

from ..common.http.querystring import csv_values, tickers
from ..common.runtime.errors import InvalidParameter
from ..readmodel import cursors
from ..readmodel.filters import AnnouncementFilter, parse_filter
from ..readmodel.mapping import hashtag_key
from ..readmodel.searchtext import query_text
from .errors import validation_failed
from .lru import BoundedLRU
from .partner import SENTIMENTS

DEFAULT_LIMIT = 20
MAX_LIMIT = 50
#: ``GET /webhooks/endpoints/{id}/attempts``: up to this many attempts (the dispatcher keeps 100).
MAX_ATTEMPTS_LIMIT = 100
MAX_CURSOR = 2**53
MIN_QUERY = 3
MAX_QUERY = 500

#: What ``q`` is trimmed of before its length is checked (the document's pattern uses the same set).
QUERY_BLANKS = " \t\r\n"

#: An integer of at most 30 significant digits after any leading zeros: every bound here is far
#: smaller, and Python refuses to convert a string of over 4,300 digits (a 500, not a 422). The
#: quantifiers are possessive, so a long run of zeros is scanned once (no backtracking).
_INT = re.compile(r"([+-]?)(?=[0-9])0*+([1-9][0-9]{0,29})?", re.ASCII)
# An ISO 8601 date and time with a UTC offset, in the extended (2024-05-01T12:00:00Z) or the
# basic (20240501T120000Z) format; minutes and seconds may be left out (reduced precision), the
# seconds may have a fraction (a dot or a comma), and the offset is Z, +hh, +hhmm or +hh:mm.
# RFC 3339 (the JSON Schema ``date-time`` format) is the extended form with seconds. A
# timestamp without an offset is ambiguous and refused.
_ISO8601 = re.compile(
    r"(?P<y>\d{4})(?P<ds>-?)(?P<mo>\d{2})(?P=ds)(?P<d>\d{2})[Tt]"
    r"(?P<h>\d{2})(?:(?P<ts>:?)(?P<mi>\d{2})(?:(?P=ts)(?P<s>\d{2})(?P<f>[.,]\d+)?)?)?"
    r"(?P<tz>[Zz]|[+-]\d{2}(?::?\d{2})?)",
    re.ASCII,
)
_MIN_UTC = datetime.min.replace(tzinfo=timezone.utc)
_MAX_UTC = datetime.max.replace(tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class Filters:
    """The /posts filters; ``None`` means "not given". Values are already normalized."""

    since: datetime | None = None
    category: tuple[str, ...] | None = None
    ticker: tuple[str, ...] | None = None
    hashtag: tuple[str, ...] | None = None
    sentiment: tuple[str, ...] | None = None
    importance_min: int | None = None


@dataclass(frozen=True, slots=True)
class PageWindow:
    limit: int = DEFAULT_LIMIT
    after: int | None = None
    before: int | None = None


def _integer(query: Mapping[str, str], name: str, low: int, high: int, default: int | None) -> int | None:
    raw = query.get(name)
    if raw is None:
        return default
    if not (m := _INT.fullmatch(raw)):
        raise validation_failed(name, f"{name} must be an integer from {low} to {high}; got {raw[:40]!r}.")
    value = int(m[1] + m[2]) if m[2] else 0
    if not low <= value <= high:
        raise validation_failed(
            name, f"{name} must be an integer from {low} to {high}; got {value if abs(value) < 10**12 else raw[:40]}."
        )
    return value


def parse_page(query: Mapping[str, str]) -> PageWindow:
    """limit (1-50, default 20), after and before (post ids, 1 to 2^53)."""
    limit = _integer(query, "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    after = _integer(query, "after", 1, MAX_CURSOR, None)
    before = _integer(query, "before", 1, MAX_CURSOR, None)
    assert limit is not None
    return PageWindow(limit, after, before)


def parse_since(raw: str | None) -> datetime | None:
    """An ISO 8601 timestamp with ``Z`` or a UTC offset (see ``_ISO8601``); a timestamp without
    an offset is rejected.

    A leap second (``:60``) counts as the last instant of its minute; instants outside
    years 1-9999 after conversion to UTC are clamped to that range.
    """
    if raw is None:
        return None
    m = _ISO8601.fullmatch(raw)
    if not m:
        hint = " (a '+' in a query string is sent as %2B; unencoded it reads as a space)" if " " in raw else ""
        raise validation_failed(
            "since",
            f"since must be an ISO 8601 timestamp with a UTC offset, e.g. 2024-05-01T12:00:00Z; got {raw[:60]!r}{hint}.",
        )
    year, month, day, hour = (int(m[g]) for g in ("y", "mo", "d", "h"))
    minute, second = int(m["mi"] or 0), int(m["s"] or 0)
    frac, offset = m["f"], m["tz"]
    micro = int((frac[1:] + "000000")[:6]) if frac else 0
    if second == 60:
        second, micro = 59, 999_999
    if offset in ("Z", "z"):
        tz = timezone.utc
    else:
        digits = offset[1:].replace(":", "")
        oh, om = int(digits[:2]), int(digits[2:] or 0)
        if oh > 23 or om > 59:
            raise validation_failed("since", f"since has an invalid UTC offset {offset!r}.")
        delta = timedelta(hours=oh, minutes=om)
        tz = timezone(delta if offset[0] == "+" else -delta)
    if hour > 23 or minute > 59 or second > 59:
        raise validation_failed("since", f"since has an invalid time of day: {raw[:60]!r}.")
    try:
        local = datetime(max(year, 1), month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        raise validation_failed("since", f"since is not a calendar date: {raw[:60]!r}.") from None
    try:
        return local.astimezone(timezone.utc)
    except OverflowError:
        return _MIN_UTC if local.year == 1 else _MAX_UTC


def _shared(parse, query: Mapping[str, str], name: str):
    """A parameter whose grammar :mod:`..common.http.querystring` holds (shared with the stream)."""
    try:
        return parse(query.get(name), name)
    except InvalidParameter as exc:
        raise validation_failed(exc.field, exc.message) from None


def _csv(query: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    return _shared(csv_values, query, name)


def parse_filters(query: Mapping[str, str]) -> Filters:
    sentiment = _csv(query, "sentiment")
    if sentiment is not None and any(v not in SENTIMENTS for v in sentiment):
        # Named as sent (the CSV grammar keeps an over-long value only as "matches nothing").
        value = next(v for v in query["sentiment"].split(",") if v and v not in SENTIMENTS)
        shown = repr(value[:40]) + (f" (cut; {len(value)} characters)" if len(value) > 40 else "")
        raise validation_failed(
            "sentiment", f"Unknown sentiment value {shown}; allowed values are {', '.join(SENTIMENTS)}."
        )
    ticker = _shared(tickers, query, "ticker")
    hashtag = _csv(query, "hashtag")
    return Filters(
        since=parse_since(query.get("since")),
        category=_csv(query, "category"),
        ticker=ticker,
        hashtag=tuple(hashtag_key(h) for h in hashtag) if hashtag is not None else None,
        sentiment=tuple(dict.fromkeys(sentiment)) if sentiment is not None else None,
        importance_min=_integer(query, "importance_min", 0, 100, None),
    )


@dataclass(frozen=True, slots=True)
class Listing:
    """What a /posts or /search query string asks for: the page, the filters, the raw ``lang``
    (resolved against the current locales per request, as they may change) and, for /search,
    the search text (trimmed and normalized, :func:`..readmodel.searchtext.query_text`)."""

    page: PageWindow
    filters: Filters
    lang: str | None
    text: str | None = None


#: Query strings longer than this are parsed every time, never kept.
MAX_KEPT_QUERY = 512


def _one(_: Listing) -> int:
    return 1


class Listings:
    """raw query string -> its :class:`Listing`, so a repeated /posts (or, with ``searching``,
    /search) query skips the parsing.

    Parsing is a pure function of the raw string, so a kept result is what parsing it again
    gives. Only valid queries are kept (an invalid one raises its 422 every time, from the
    same code), only query strings up to ``MAX_KEPT_QUERY`` characters, and at most
    ``max_entries`` of them, least recently used dropped first: the keys are untrusted input.
    """

    def __init__(self, max_entries: int = 1024, *, searching: bool = False) -> None:
        self._items: BoundedLRU[Listing] = BoundedLRU(_one, max_entries=max_entries, max_bytes=max_entries)
        self._searching = searching

    def __len__(self) -> int:
        return len(self._items)

    def parse(self, raw: str, query: Callable[[], Mapping[str, str]]) -> Listing:
        """The listing of the raw query string ``raw``; ``query()`` gives its decoded parameters."""
        listing = self._items.get(raw)
        if listing is None:
            decoded = query()
            # The order of the checks is the order of their 422s: q first on /search.
            text = query_text(parse_q(decoded)) if self._searching else None
            listing = Listing(parse_page(decoded), parse_filters(decoded), decoded.get("lang"), text)
            if len(raw) <= MAX_KEPT_QUERY:
                self._items.put(raw, listing)
        return listing


def parse_q(query: Mapping[str, str]) -> str:
    """The search text: required, 3 to 500 characters once trimmed of spaces, tabs and line breaks."""
    raw = query.get("q")
    if raw is None:
        raise validation_failed("q", f"q is required: a search text of at least {MIN_QUERY} characters.")
    if len(raw) > MAX_QUERY:
        raise validation_failed("q", f"q is at most {MAX_QUERY} characters long; got {len(raw)}.")
    text = raw.strip(QUERY_BLANKS)
    if len(text) < MIN_QUERY:
        raise validation_failed(
            "q", f"q must be at least {MIN_QUERY} characters long (after trimming); got {len(text)}."
        )
    return text.replace("\x00", " ")


def text_key(segment: str) -> str | None:
    """A path segment usable as a lookup key, or None when it cannot name anything stored."""
    if "\x00" in segment or len(segment) > 300:
        return None
    return segment


@dataclass(frozen=True, slots=True)
class ChangesQuery:
    """``GET /changes``: the cursor (None: start at the head), the stream's filter and the page size."""

    cursor: cursors.Cursor | None
    filter: AnnouncementFilter
    limit: int


def parse_changes(query: Mapping[str, str]) -> ChangesQuery:
    """cursor (a token from ``/changes`` or the stream), lang, tickers and categories (the stream's
    filter grammar), limit (1-50, default 20)."""
    raw = query.get("cursor")
    cursor = None
    if raw is not None:
        try:
            cursor = cursors.decode(raw)
        except cursors.InvalidCursor:
            raise validation_failed(
                "cursor",
                "cursor must be a cursor token returned by /changes or the stream "
                f"(cursor or post.created cursor); got {raw[:40]!r}.",
            ) from None
    try:
        wanted = parse_filter(query)
    except InvalidParameter as exc:
        raise validation_failed(exc.field, exc.message) from None
    limit = _integer(query, "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    assert limit is not None
    return ChangesQuery(cursor, wanted, limit)


def parse_attempts_limit(query: Mapping[str, str]) -> int:
    """``limit`` of the webhook attempts (1-100, default 20)."""
    limit = _integer(query, "limit", 1, MAX_ATTEMPTS_LIMIT, DEFAULT_LIMIT)
    assert limit is not None
    return limit
