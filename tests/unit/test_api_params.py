"""Pure rules of the read API's edge: query parameters (and the kept parses), If-None-Match matching, the
page statement, the bounded LRU of its caches."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tickerwire.services.api.conditional import matches
from tickerwire.services.api.lru import BoundedLRU
from tickerwire.services.api.params import (
    MAX_KEPT_QUERY,
    Filters,
    Listing,
    Listings,
    PageWindow,
    parse_filters,
    parse_page,
    parse_q,
    parse_since,
)
from tickerwire.services.api.queries import page_query
from tickerwire.services.common.http.envelope import ApiError
from tickerwire.services.common.http.querystring import bcp47_case
from tickerwire.services.readmodel.searchtext import query_text


def test_since_accepts_iso8601_with_an_offset_and_clamps_extremes():
    noon = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert parse_since("2024-05-01T12:00:00Z") == noon
    assert parse_since("2024-05-01t14:00:00.5+02:00") == noon.replace(microsecond=500000)
    # ISO 8601 beyond RFC 3339: basic format, reduced precision, +hh and +hhmm offsets, a decimal comma.
    for same in [
        "20240501T120000Z",
        "2024-05-01T12:00Z",
        "2024-05-01T12Z",
        "2024-05-01T13:00:00+01",
        "20240501T1330+0130",
        "2024-05-01T08:00:00-04:00",
    ]:
        assert parse_since(same) == noon, same
    assert parse_since("2024-05-01T12:00:00,25Z") == noon.replace(microsecond=250000)
    assert parse_since("2016-12-31T23:59:60Z").second == 59
    assert parse_since("0001-01-01T00:00:00+01:00").year == 1
    for bad in [
        "2024-05-01T12:00:00",
        "2024-05-01",
        "2024-02-30T00:00:00Z",
        "2024-05-01T25:00:00Z",
        "",
        "now",
        "2024-05-01T12:00:00+1",
        "2024-05-01T12:00:00+24:00",
        "2024-0501T12Z",
    ]:
        with pytest.raises(ApiError) as exc:
            parse_since(bad)
        assert exc.value.field == "since"


def test_since_with_an_unencoded_plus_says_how_to_send_it():
    with pytest.raises(ApiError) as exc:
        parse_since("2024-05-01T13:00:00 01:00")
    assert "%2B" in exc.value.message


def test_page_limits_and_cursors():
    assert parse_page({}) == PageWindow(20, None, None)
    assert parse_page({"limit": "50", "after": "7", "before": "9"}) == PageWindow(50, 7, 9)
    for params, field in [
        ({"limit": "0"}, "limit"),
        ({"limit": "51"}, "limit"),
        ({"limit": "1e3"}, "limit"),
        ({"after": "-1"}, "after"),
        ({"before": str(2**53 + 1)}, "before"),
        ({"limit": "٣"}, "limit"),
    ]:
        with pytest.raises(ApiError) as exc:
            parse_page(params)
        assert exc.value.field == field and exc.value.status == 422


def test_filters_normalize_case_and_skip_empty_items():
    f = parse_filters({"ticker": "btc,,Eth", "hashtag": "DeFi", "category": "", "sentiment": "BULLISH,BULLISH"})
    assert f.ticker == ("BTC", "ETH") and f.hashtag == ("defi",) and f.category is None and f.sentiment == ("BULLISH",)
    with pytest.raises(ApiError) as exc:
        parse_filters({"sentiment": "bullish"})
    assert "bullish" in exc.value.message and "BULLISH, NEUTRAL, BEARISH" in exc.value.message


def test_repeated_values_count_once_and_overlong_values_match_nothing_instead_of_failing():
    f = parse_filters({"ticker": ",".join(["btc", "BTC"] * 10), "category": "defi," + "x" * 101, "hashtag": "y" * 500})
    assert f.ticker == ("BTC",)  # 20 items, one value
    assert f.category == ("defi", "") and f.hashtag == ("",)  # "" is stored nowhere: it matches nothing


@pytest.mark.parametrize(
    "raw",
    [
        ",".join(f"T{i}" for i in range(21)),  # 21 distinct values
        ",".join(["BTC"] * 21),  # 21 repeats of one value
        "BTC" + "," * 20,  # one value and 20 empty items
    ],
)
def test_more_than_20_items_are_refused_as_the_schema_says(raw):
    """The OpenAPI document gives every CSV parameter ``maxItems: 20``; empty and repeated items
    are items of that array."""
    with pytest.raises(ApiError) as exc:
        parse_filters({"ticker": raw})
    assert exc.value.field == "ticker" and "at most 20 comma-separated items; got 21" in exc.value.message


def test_language_tags_take_the_case_bcp47_recommends():
    for tag, cased in [
        ("de-de", "de-DE"),
        ("EN-us", "en-US"),
        ("zh-hans-cn", "zh-Hans-CN"),
        ("pt-BR", "pt-BR"),
        ("x", "x"),
    ]:
        assert bcp47_case(tag) == cased


def test_q_trimmed_length():
    assert parse_q({"q": "  btc \n"}) == "btc"
    for q in [None, "ab", " \t ab\r\n", "x" * 501]:
        with pytest.raises(ApiError) as exc:
            parse_q({} if q is None else {"q": q})
        assert exc.value.field == "q"


def test_if_none_match_weak_comparison_lists_and_star():
    assert (
        matches('"abc"', '"abc"')
        and matches('W/"abc"', '"abc"')
        and matches('"x", W/"abc"', '"abc"')
        and matches("*", '"abc"')
    )
    assert not matches('"abd"', '"abc"') and not matches("abc", '"abc"') and not matches("", '"abc"')


def test_page_query_passes_values_only_as_parameters():
    sql, args = page_query("en-US", Filters(ticker=("X'; DROP TABLE posts; --",)), PageWindow(20, 5, None))
    assert "DROP" not in sql and args[0] == "en-US" and ["X'; DROP TABLE posts; --"] in args


def test_listings_keep_valid_parses_only_bounded_and_short():
    listings = Listings(max_entries=2)
    decoded = {"limit": "5", "lang": "es-ES", "sentiment": "BULLISH"}
    calls = []

    def query():
        calls.append(1)
        return decoded

    first = listings.parse("limit=5&lang=es-ES&sentiment=BULLISH", query)
    assert first == Listing(PageWindow(5), parse_filters(decoded), "es-ES")
    assert listings.parse("limit=5&lang=es-ES&sentiment=BULLISH", query) is first and len(calls) == 1
    for _ in range(2):  # an invalid query raises its 422 every time: never kept
        with pytest.raises(ApiError) as exc:
            listings.parse("limit=0", lambda: {"limit": "0"})
        assert exc.value.field == "limit"
    assert len(listings) == 1
    long = "unknown=" + "a" * MAX_KEPT_QUERY  # unknown parameters are ignored: a valid query
    listings.parse(long, lambda: {"unknown": "a" * MAX_KEPT_QUERY})
    assert len(listings) == 1  # too long to keep
    listings.parse("", dict)
    listings.parse("limit=7", lambda: {"limit": "7"})
    assert len(listings) == 2  # bounded: the least recently used went first
    listings.parse("limit=5&lang=es-ES&sentiment=BULLISH", query)
    assert len(calls) == 2


def test_search_listings_keep_the_normalized_text_and_check_q_first():
    searches = Listings(searching=True)
    decoded = {"q": "  \u201cbitcoin etf\u201d  ", "limit": "5"}
    calls = []

    def query():
        calls.append(1)
        return decoded

    first = searches.parse("q=x&limit=5", query)
    assert first == Listing(PageWindow(5), parse_filters(decoded), None, query_text("\u201cbitcoin etf\u201d"))
    assert first.text == '"bitcoin etf"'
    assert searches.parse("q=x&limit=5", query) is first and len(calls) == 1
    with pytest.raises(ApiError) as exc:  # q and limit both wrong: the 422 names q, as before
        searches.parse("q=ab&limit=0", lambda: {"q": "ab", "limit": "0"})
    assert exc.value.field == "q"
    assert Listings().parse("q=ab", lambda: {"q": "ab"}).text is None  # /posts ignores q


def test_bounded_lru_drops_least_recent_by_entries_and_by_size():
    lru = BoundedLRU(len, max_entries=3, max_bytes=10)
    for key, value in [("a", b"1234"), ("b", b"1234"), ("c", b"1")]:
        lru.put(key, value)
    assert lru.get("a") == b"1234"  # now the most recent
    lru.put("d", b"12")  # 4+4+1+2 = 11 bytes, 4 entries: b goes first
    assert "b" not in lru and [k in lru for k in "acd"] == [True, True, True]
    lru.put("e", b"1")  # 4 entries: c (least recent) goes
    assert "c" not in lru and len(lru) == 3
    lru.put("big", b"x" * 11)  # larger than the whole budget: not kept, nothing dropped
    assert "big" not in lru and len(lru) == 3
    lru.put("a", b"123456789")  # replaced: its old size (4) is released, then d (least recent) goes to fit
    assert lru.get("a") == b"123456789" and "d" not in lru and len(lru) == 2
    lru.clear()
    assert len(lru) == 0 and lru.get("a") is None
