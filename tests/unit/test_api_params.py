"""Pure rules of the read API's edge: query parameters, If-None-Match matching, the page statement."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tickerwire.services.api.conditional import matches
from tickerwire.services.common.envelope import ApiError
from tickerwire.services.api.params import Page, parse_filters, parse_page, parse_q, parse_since
from tickerwire.services.api.queries import page_query
from tickerwire.services.api.params import Filters


def test_since_accepts_rfc3339_with_offset_and_clamps_extremes():
    assert parse_since("2024-05-01T12:00:00Z") == datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert parse_since("2024-05-01t14:00:00.5+02:00") == datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=timezone.utc)
    assert parse_since("2016-12-31T23:59:60Z").second == 59
    assert parse_since("0001-01-01T00:00:00+01:00").year == 1
    for bad in ["2024-05-01T12:00:00", "2024-05-01", "2024-02-30T00:00:00Z", "2024-05-01T25:00:00Z", "", "now"]:
        with pytest.raises(ApiError) as exc:
            parse_since(bad)
        assert exc.value.field == "since"


def test_page_limits_and_cursors():
    assert parse_page({}) == Page(20, None, None)
    assert parse_page({"limit": "50", "after": "7", "before": "9"}) == Page(50, 7, 9)
    for params, field in [({"limit": "0"}, "limit"), ({"limit": "51"}, "limit"), ({"limit": "1e3"}, "limit"),
                          ({"after": "-1"}, "after"), ({"before": str(2**53 + 1)}, "before"), ({"limit": "٣"}, "limit")]:
        with pytest.raises(ApiError) as exc:
            parse_page(params)
        assert exc.value.field == field and exc.value.status == 422


def test_filters_normalize_case_and_skip_empty_items():
    f = parse_filters({"ticker": "btc,,Eth", "hashtag": "DeFi", "category": "", "sentiment": "BULLISH,BULLISH"})
    assert f.ticker == ("BTC", "ETH") and f.hashtag == ("defi",) and f.category is None and f.sentiment == ("BULLISH",)
    with pytest.raises(ApiError) as exc:
        parse_filters({"sentiment": "bullish"})
    assert "bullish" in exc.value.message and "BULLISH, NEUTRAL, BEARISH" in exc.value.message


def test_q_trimmed_length():
    assert parse_q({"q": "  btc \n"}) == "btc"
    for q in [None, "ab", " \t ab\r\n", "x" * 501]:
        with pytest.raises(ApiError) as exc:
            parse_q({} if q is None else {"q": q})
        assert exc.value.field == "q"


def test_if_none_match_weak_comparison_lists_and_star():
    assert matches('"abc"', '"abc"') and matches('W/"abc"', '"abc"') and matches('"x", W/"abc"', '"abc"') and matches("*", '"abc"')
    assert not matches('"abd"', '"abc"') and not matches("abc", '"abc"') and not matches("", '"abc"')


def test_page_query_passes_values_only_as_parameters():
    sql, args = page_query("en-US", Filters(ticker=("X'; DROP TABLE posts; --",)), Page(20, 5, None))
    assert "DROP" not in sql and args[0] == "en-US" and ["X'; DROP TABLE posts; --"] in args
