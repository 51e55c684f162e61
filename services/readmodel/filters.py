"""The announcement filter: which announced translations a reader asked for, by locale, ticker
and category. One type, parsed and validated here once, for every reader of the announcements:
the stream's opt-in filters (``lang``, ``tickers``, ``categories`` on the stream URL), ``GET
/changes`` (the same three parameters), a webhook endpoint's stored filters (``locales``,
``tickers``, ``categories``; ``tickerwire webhooks register`` takes them as options), and the
walk of the announcements (:func:`.walk.walk`).

Each filter takes the CSV grammar of the ``/posts`` filters (``services/common/http/querystring.py``:
empty items skipped, repeats counted once, at most 20 items; a value over 100 characters matches
nothing); more items raise :class:`InvalidParameter` naming the parameter, which each caller
turns into its own refusal (the 422 ``VALIDATION_FAILED`` envelope, a command's ``--option:``
line). Semantics are those of ``/posts``: OR within a filter, AND between filters; tickers
compare upper-case; a group category slug matches posts in any of its leaves; unknown values
match nothing. Locales are language tags in the case BCP 47 recommends, matched
case-insensitively but otherwise exactly (no fallback to the default locale, unlike the ``lang``
of HTTP reads, which picks one locale to render).

A webhook endpoint's filters are stored in an event, so each value must also be of the event
contract's form (``schemas/models.py``): ``contract=True`` checks that.

Equal filters are equal values whatever the order their items were given in, so the stream's
connections with equal filters share one filter, and the hub decides once per message and
distinct filter set, not once per connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple

from pydantic import TypeAdapter, ValidationError

from tickerwire.schemas.models import LocaleCode, Slug, Ticker

from ..common.http.querystring import bcp47_case, csv_values, tickers as ticker_values
from ..common.runtime.errors import InvalidParameter


class FilterNames(NamedTuple):
    """What a reader calls the three filters (its query parameters or options)."""

    locales: str
    tickers: str
    categories: str


#: The stream URL's and ``GET /changes``' parameters.
QUERY_NAMES = FilterNames("lang", "tickers", "categories")
#: A webhook endpoint's stored fields, and the options of ``tickerwire webhooks register``.
ENDPOINT_NAMES = FilterNames("locales", "tickers", "categories")

#: The event contract's form of each filter's values, and how a refusal names it.
_CONTRACT: dict[str, tuple[TypeAdapter[Any], str]] = {
    "locales": (TypeAdapter(LocaleCode), "a locale code (e.g. en-US)"),
    "tickers": (TypeAdapter(Ticker), "a ticker symbol (e.g. BTC)"),
    "categories": (TypeAdapter(Slug), "a category slug (e.g. bitcoin-etfs)"),
}


@dataclass(frozen=True, slots=True)
class FilterFacts:
    """What an :class:`AnnouncementFilter` looks at, from the announced translation's row."""

    lang: str  # in BCP 47 case, like a filter's locales: tags compare case-insensitively
    tickers: frozenset[str]
    categories: frozenset[str]  # leaf and group slugs, as the /posts category filter sees them

    @classmethod
    def of(cls, lang: str, tickers: Iterable[str], categories: Iterable[str]) -> "FilterFacts":
        """The facts of an announced translation; its ``lang`` as published (``pt-br`` is
        matched by a filter's ``pt-BR``, as /posts matches it)."""
        return cls(bcp47_case(lang), frozenset(tickers), frozenset(categories))


def _set(values: tuple[str, ...] | None) -> frozenset[str] | None:
    return frozenset(values) if values is not None else None


@dataclass(frozen=True, slots=True, eq=False)
class AnnouncementFilter:
    """None means "not given" (no restriction). Values are normalized (locales in BCP 47 case,
    tickers upper-case), each once, in the order given; equality ignores that order."""

    locales: tuple[str, ...] | None = None
    tickers: tuple[str, ...] | None = None
    categories: tuple[str, ...] | None = None

    def _sets(self) -> tuple[frozenset[str] | None, ...]:
        return _set(self.locales), _set(self.tickers), _set(self.categories)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnnouncementFilter) and self._sets() == other._sets()

    def __hash__(self) -> int:
        return hash(self._sets())

    def admits(self, post: FilterFacts) -> bool:
        return (
            (self.locales is None or post.lang in self.locales)
            and (self.tickers is None or not post.tickers.isdisjoint(self.tickers))
            and (self.categories is None or not post.categories.isdisjoint(self.categories))
        )

    def locales_read(self, served: Iterable[str]) -> frozenset[str]:
        """The locales a walk reads, lower-cased: those the service answers in (``served``),
        narrowed to this filter's locales when it has some."""
        answered = frozenset(code.lower() for code in served)
        return answered if self.locales is None else answered & {code.lower() for code in self.locales}


EVERYTHING = AnnouncementFilter()


def _contract(field: str, name: str, values: tuple[str, ...] | None) -> None:
    adapter, what = _CONTRACT[field]
    for value in values or ():
        try:
            adapter.validate_python(value)
        except ValidationError:
            raise InvalidParameter(name, f"{value[:60]!r} is not {what}") from None


def parse_filter(
    given: Mapping[str, str | None], names: FilterNames = QUERY_NAMES, *, contract: bool = False
) -> AnnouncementFilter:
    """The filter of ``given`` (query parameters or options, named by ``names``); raises
    :class:`InvalidParameter` naming the parameter for a value breaking the grammar or, with
    ``contract``, a value not of the event contract's form."""
    locales = csv_values(given.get(names.locales), names.locales)
    found = AnnouncementFilter(
        tuple(dict.fromkeys(bcp47_case(v) for v in locales)) if locales is not None else None,
        ticker_values(given.get(names.tickers), names.tickers),
        csv_values(given.get(names.categories), names.categories),
    )
    if contract:
        for field, name in zip(FilterNames._fields, names):
            _contract(field, name, getattr(found, field))
    return found
