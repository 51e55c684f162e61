"""The upcaster: a version 1 post event is the version 2 event of the same post."""

from __future__ import annotations

import orjson

from tests.support.events import encode_v2, post_ev
from tickerwire.schemas.models import PostEventV2, decode_event, encode_event
from tickerwire.services.readmodel.upcast import stored_post, upcast


def test_a_v1_post_becomes_the_v2_post_a_v2_publisher_sends():
    v1 = post_ev(7, 3, tickers=("BTC", "ETH"))
    v2 = upcast(v1)
    assert isinstance(v2, PostEventV2) and v2.schema_version == 2 and v2.version == 3
    assert [(t.symbol, t.relevance) for t in v2.data.tickers] == [("BTC", 1.0), ("ETH", 1.0)]
    assert (v2.data.source.url, v2.data.source.byline, v2.data.updated_at) == (
        v1.data.source_url,
        v1.data.byline,
        None,
    )
    assert [dict(t) for t in v2.data.translations] == [dict(t) for t in v1.data.translations]
    assert v2.data.symbols == v1.data.tickers
    # Validated from its JSON, the upcast event is the same event: nothing unchecked slipped in.
    assert decode_event(encode_v2(v1)) == v2 and decode_event(encode_v2(v1)).data == v2.data


def test_a_ticker_named_twice_in_v1_is_one_mention():
    v2 = upcast(post_ev(6, tickers=("BTC", "ETH", "BTC")))
    assert v2.data.symbols == ("BTC", "ETH")
    assert stored_post(v2.data.model_dump_json()) == v2.data  # a valid v2 snapshot


def test_a_v2_event_and_other_types_pass_through():
    v2 = decode_event(encode_v2(post_ev(8)))
    assert upcast(v2) is v2


def test_a_stored_snapshot_of_either_version_reads_as_v2():
    v1 = post_ev(9)
    expected = upcast(v1).data
    assert stored_post(v1.data.model_dump_json()) == expected  # a row written before version 2
    assert stored_post(expected.model_dump_json()) == expected
    assert orjson.loads(encode_event(v1))["schema_version"] == 1
