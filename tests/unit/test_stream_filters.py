"""The announcement filter (services/readmodel/filters.py) as the stream, ``GET /changes`` and the
webhook endpoints' options take it: one parser, the /posts CSV grammar, /posts semantics, one set
of error messages, and a hub that decides once per message and distinct filter set (with a fake
socket standing in for a client)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.support.fakes import FakeSocket
from tickerwire.services.api.params import parse_changes, parse_filters
from tickerwire.services.cli.admin import BadArgument
from tickerwire.services.cli.webhooks import endpoint_filter
from tickerwire.services.common.http.envelope import ApiError
from tickerwire.services.common.runtime.errors import InvalidParameter
from tickerwire.services.readmodel.filters import EVERYTHING, AnnouncementFilter, FilterFacts, parse_filter
from tickerwire.services.stream import protocol
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics


def test_no_parameter_means_everything():
    assert parse_filter({}) == EVERYTHING
    assert parse_filter({"lang": "", "tickers": ",,", "categories": ","}) == EVERYTHING  # empty items are skipped
    assert EVERYTHING.admits(FilterFacts("ja-JP", frozenset(), frozenset()))


def test_values_are_normalized_like_posts():
    f = parse_filter({"lang": "de-de,FR-fr", "tickers": "btc,Eth", "categories": "markets,,defi"})
    assert f == AnnouncementFilter(
        frozenset({"de-DE", "fr-FR"}), frozenset({"BTC", "ETH"}), frozenset({"markets", "defi"})
    )


@pytest.mark.parametrize(
    ("stream_name", "posts_name", "raw"),
    [
        ("tickers", "ticker", ",".join(f"T{i}" for i in range(21))),
        ("categories", "category", ",".join(f"c{i}" for i in range(21))),
    ],
)
def test_the_grammar_is_the_one_of_posts(stream_name, posts_name, raw):
    with pytest.raises(InvalidParameter) as stream_err:
        parse_filter({stream_name: raw})
    with pytest.raises(ApiError) as posts_err:
        parse_filters({posts_name: raw})
    assert stream_err.value.field == stream_name and posts_err.value.field == posts_name
    assert stream_err.value.message.replace(stream_name, "P") == posts_err.value.message.replace(posts_name, "P")
    with pytest.raises(InvalidParameter) as lang_err:
        parse_filter({"lang": raw})
    assert lang_err.value.field == "lang"


def test_or_within_and_between_parameters():
    post = FilterFacts("de-DE", frozenset({"BTC", "SOL"}), frozenset({"markets", "trading"}))
    assert parse_filter({"lang": "en-US,de-DE"}).admits(post)
    assert not parse_filter({"lang": "en-US"}).admits(post)
    assert not parse_filter({"lang": "xx"}).admits(post)  # unknown values match nothing, no error
    assert parse_filter({"tickers": "eth,sol"}).admits(post)
    assert parse_filter({"categories": "markets", "tickers": "btc", "lang": "de-DE"}).admits(post)
    assert not parse_filter({"categories": "markets", "tickers": "eth"}).admits(post)
    assert not parse_filter({"categories": "nft"}).admits(post)


def test_equal_filters_are_equal_in_any_order_and_keep_the_order_given():
    one = parse_filter({"lang": "fr-fr,de-DE", "tickers": "eth,btc,ETH"})
    other = parse_filter({"lang": "de-de,FR-FR", "tickers": "BTC,eth"})
    assert one == other and hash(one) == hash(other) and len({one, other}) == 1
    assert one.locales == ("fr-FR", "de-DE") and one.tickers == ("ETH", "BTC")
    assert one != parse_filter({"lang": "fr-FR"}) and EVERYTHING.locales_read(["en-US", "de-DE"]) == {"en-us", "de-de"}
    assert one.locales_read(["en-US", "de-DE"]) == {"de-de"}


@pytest.mark.parametrize(
    ("name", "option", "raw"),
    [
        ("lang", "locales", ",".join(f"l{i}" for i in range(21))),
        ("tickers", "tickers", ",".join(f"T{i}" for i in range(21))),
        ("categories", "categories", ",".join(f"c{i}" for i in range(21))),
    ],
)
def test_the_stream_changes_and_the_webhook_options_refuse_with_one_message(name, option, raw):
    with pytest.raises(InvalidParameter) as stream_err:
        parse_filter({name: raw})
    with pytest.raises(ApiError) as changes_err:
        parse_changes({name: raw})
    with pytest.raises(BadArgument) as option_err:
        endpoint_filter(raw, option)
    assert stream_err.value.field == changes_err.value.field == name
    assert stream_err.value.message == changes_err.value.message
    assert str(option_err.value) == f"--{option}: " + stream_err.value.message.replace(name, option)


def test_changes_reads_the_streams_filter():
    query = {"lang": "de-de,FR-fr", "tickers": "btc,Eth", "categories": "markets,,defi"}
    assert parse_changes(query).filter == parse_filter(query)
    assert parse_changes({}).filter == EVERYTHING


class CountingFilter(AnnouncementFilter):
    """Counts the decisions taken, to show there is one per filter set and message."""

    decisions: list = []

    def admits(self, post: FilterFacts) -> bool:
        CountingFilter.decisions.append(self)
        return AnnouncementFilter.admits(self, post)


async def test_hub_decides_once_per_filter_set_and_delivers_the_same_bytes():
    hub = Hub(StreamMetrics(), queue_size=8, sink_of=lambda ws: ws)
    german, btc, everything = (
        CountingFilter(locales=("de-DE",)),
        CountingFilter(tickers=("BTC",)),
        CountingFilter(),
    )
    sockets = {name: [FakeSocket() for _ in range(20)] for name in ("german", "btc", "everything")}
    conns = []
    for name, f in (("german", german), ("btc", btc), ("everything", everything)):
        for i, ws in enumerate(sockets[name]):
            # equal filters built separately still share a group
            conns.append(
                hub.open(
                    ws,
                    None,
                    "ws",
                    "k",
                    f"ses_{name}_{i}",
                    CountingFilter(**{s: getattr(f, s) for s in ("locales", "tickers", "categories")}),
                )
            )
    assert len(hub.groups) == 3 and hub.metrics.registry.get_sample_value("tickerwire_stream_filter_groups") == 3
    CountingFilter.decisions.clear()
    message = protocol.post_created('{"id":1,"lang":"en-US"}', 3, 99)
    delivered = hub.publish(message, FilterFacts("en-US", frozenset({"BTC"}), frozenset()))
    assert len(CountingFilter.decisions) == 3  # 60 connections, 3 filter sets: 3 decisions
    assert delivered == 40
    for _ in range(3):
        await asyncio.sleep(0)
    assert all(not ws.frames for ws in sockets["german"])
    assert all(ws.messages == [message] for ws in sockets["btc"] + sockets["everything"])
    assert len({id(ws.frames[0]) for ws in sockets["btc"] + sockets["everything"]}) == 1  # one frame, built once
    assert orjson.loads(sockets["btc"][0].messages[0])["log_position"] == "3:99"
    for conn in conns:
        await hub.forget(conn)
    assert hub.groups == {} and hub.metrics.registry.get_sample_value("tickerwire_stream_filter_groups") == 0


def test_a_locale_published_in_another_case_is_matched_like_posts_matches_it():
    # The event contract accepts "pt-br"; a filter's "pt-BR" (or "PT-br") must match it, as
    # GET /posts?lang=pt-BR serves it.
    published = FilterFacts.of("pt-br", ["BTC"], ["markets"])
    assert parse_filter({"lang": "pt-BR"}).admits(published)
    assert parse_filter({"lang": "PT-br"}).admits(published)
    assert not parse_filter({"lang": "pt-PT"}).admits(published)
