"""The checker's judgement on made-up histories (pure logic): each kind of violation it names
is found (a counter off by one among them), a clean history has none, and the lost, doubled
and refused counts are each counted apart; so are a webhook endpoint's lost, out of order,
doubled, bad signature and unexpected requests; so are a stream cap exceeded for longer than
the grace and a rate limit overspent in a minute."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import orjson

from tests.chaos.checker import (
    caught_up,
    counter_mismatches,
    deliveries,
    expected_counters,
    limits_tally,
    most_open,
    rate_limit,
    stream_cap,
    tallied,
    tally,
    webhook_tallied,
    webhook_tally,
)
from tests.chaos.history import Delivery, Facts, History
from tests.support.events import post_ev
from tests.support.receivers import BAD_SIGNATURE, Request


def history(got: list[Delivery], walked: list, aborted: frozenset[int] = frozenset()) -> History:
    h = History(seed=5)
    h.published = {(1, "en-US"): 0.0, (1, "de-DE"): 0.0, (2, "en-US"): 0.0}
    h.aborted = set(aborted)
    h.deliveries["f"] = got
    h.walked = walked
    return h


CLEAN = [Delivery((1, "de-DE"), 0, 4, 1.0), Delivery((1, "en-US"), 0, 4, 1.0), Delivery((2, "en-US"), 1, 7, 1.0)]
WALKED = [(1, "de-DE"), (1, "en-US"), (2, "en-US")]


def test_a_clean_history_has_no_violation():
    assert deliveries(history(CLEAN, WALKED)) == []


def test_a_missing_a_doubled_and_an_aborted_announcement_are_each_named():
    got = [*CLEAN[:2], CLEAN[1], Delivery((9, "en-US"), 1, 9, 1.0)]
    found = deliveries(history(got, WALKED[:2], aborted=frozenset({9})))
    assert any(v.startswith("f: 1 announcements never received") for v in found), found
    assert any(v.startswith("f: 1 received more than once") for v in found), found
    assert any(v.startswith("f: received posts of an aborted transaction") for v in found), found
    assert "/changes walk: 1 announcements never received, e.g. [(2, 'en-US')]" in found, found


def test_lost_doubled_and_refused_are_counted_apart():
    assert tally(history(CLEAN, WALKED), unserved=set()) == {"lost": 0, "doubled": 0, "refused": 0}
    # (2, en-US) never pushed to f; (1, de-DE) not served by GET; (1, en-US) pushed twice and
    # walked twice (one pair, counted once); one cursor refused twice and another once.
    h = history([*CLEAN[:2], CLEAN[1]], [*WALKED, (1, "en-US")])
    h.refused("f", "c1", "past the committed log position")
    h.refused("f", "c1", "past the committed log position")
    h.refused("/changes walk", "c2", "past the committed log position")
    counts = tally(h, unserved={(1, "de-DE")})
    assert counts == {"lost": 2, "doubled": 1, "refused": 2}
    assert [v.split(":")[0] for v in tallied(counts, h)] == ["lost", "doubled", "refused"]


def test_an_announcement_below_the_last_of_its_partition_is_out_of_order():
    got = [CLEAN[1], CLEAN[0], CLEAN[2]]  # (4, en-US) before (4, de-DE): not ascending
    assert deliveries(history(got, WALKED)) == [
        "f: out of order on partition 0: (4, 'de-DE') after (4, 'en-US') ((1, 'de-DE'))"
    ]


AS_OF = datetime(2026, 1, 5, 15, 0, tzinfo=timezone.utc)


def counted(history: History) -> History:
    """Three posts: one BTC and ETH (bullish), one BTC (bearish), one of the minute that has
    just left the 24 h window (ETH, neutral: counted by its token, not by the pulse)."""
    for post_id, version, at, sentiment, tickers in [
        (1, 2, AS_OF - timedelta(seconds=30), "BULLISH", ("BTC", "ETH")),
        (2, 1, AS_OF - timedelta(hours=24) + timedelta(minutes=1), "BEARISH", ("BTC",)),
        (3, 1, AS_OF - timedelta(hours=24) + timedelta(seconds=59), "NEUTRAL", ("ETH",)),
    ]:
        history.posts[post_id] = Facts(version, at, sentiment, tickers)
    return history


def bodies(btc: int, eth: int, bullish: int, neutral: int, bearish: int) -> tuple[dict, dict]:
    total = bullish + neutral + bearish
    shares = {"BULLISH": bullish, "NEUTRAL": neutral, "BEARISH": bearish}
    return (
        {"tokens": [{"ticker": "BTC", "post_count": btc}, {"ticker": "ETH", "post_count": eth}]},
        {
            "window": "24h",
            "as_of": "2026-01-05T15:00:00.000Z",
            "total_posts": total,
            "breakdown": {s: {"count": n, "percent": n / total if total else 0} for s, n in shares.items()},
        },
    )


def test_counters_that_add_up_to_the_history_pass():
    assert counter_mismatches(counted(History(seed=5)), *bodies(2, 2, 1, 0, 1)) == []


def test_a_token_count_or_a_pulse_count_off_by_one_is_named():
    history = counted(History(seed=5))
    assert counter_mismatches(history, *bodies(3, 2, 1, 0, 1)) == [
        "counters: tokens served / expected {'BTC': (3, 2)} (as of 2026-01-05T15:00:00.000Z)"
    ]
    # The post of the minute that left the window counted anyway: the pulse is off.
    assert counter_mismatches(history, *bodies(2, 2, 1, 1, 1)) == [
        "counters: pulse served / expected {'NEUTRAL': (1, 0)} (as of 2026-01-05T15:00:00.000Z)"
    ]


def test_the_last_acknowledged_version_of_a_post_is_what_counts():
    history = History(seed=5)
    history.acknowledged_posts([post_ev(7, 1, tickers=("ETH",), at=AS_OF, sentiment="BEARISH")])
    history.acknowledged_posts([post_ev(7, 2, tickers=("BTC",), at=AS_OF, sentiment="BULLISH")])
    history.acknowledged_posts([post_ev(7, 1, tickers=("ETH",), at=AS_OF, sentiment="BEARISH")])  # a replay
    assert expected_counters(history, AS_OF) == {
        "tokens": {"BTC": 1},
        "pulse": {"BULLISH": 1, "NEUTRAL": 0, "BEARISH": 0},
    }
    assert list(history.published) == [(7, "en-US")]


def request(key: tuple[int, str], position: tuple[int, int], answer: str = "ok", *, wid: str = "", title: str = "t"):
    partition, offset = position
    body = orjson.dumps(
        {
            "type": "post.created",
            "log_position": f"{partition}:{offset}",
            "data": {"id": key[0], "lang": key[1], "title": title},
        }
    )
    return Request(wid or f"msg_e_{partition}_{offset}_{key[1]}", 1_700_000_000, body, answer)


def hooked(requests: list[Request], langs: tuple[str, ...] | None = None) -> History:
    """The three announcements of :func:`history` at one endpoint, filtered by ``langs``."""
    h = history(CLEAN, WALKED, aborted=frozenset({9}))
    h.endpoints["whe_a"] = langs
    for r in requests:
        h.hook("whe_a", r)
    return h


#: The three announcements' requests in cursor order, the first refused once and redelivered.
HOOKED = [
    request((1, "de-DE"), (0, 4), "500"),
    request((1, "de-DE"), (0, 4)),
    request((1, "en-US"), (0, 4)),
    request((2, "en-US"), (1, 7), "reset"),
    request((2, "en-US"), (1, 7)),
]
NONE = {"lost": 0, "out of order": 0, "doubled": 0, "changed": 0, "bad signatures": 0, "unexpected": 0}


def test_an_endpoint_that_acknowledged_everything_in_order_has_no_webhook_violation():
    h = hooked(HOOKED)
    assert webhook_tally(h) == {"whe_a": {"requests": 5, "acknowledged": 3, **NONE}}
    assert webhook_tallied(webhook_tally(h), h) == []
    assert caught_up(h)
    # A locale filter: only what it admits is expected.
    h = hooked([r for r in HOOKED if r.key[1] == "de-DE"], langs=("de-DE",))
    assert webhook_tally(h)["whe_a"] == {"requests": 2, "acknowledged": 1, **NONE}


def test_an_announcement_only_ever_failed_is_lost_and_the_run_is_not_caught_up():
    h = hooked(HOOKED[:4])  # (2, en-US) answered a reset, never a 200
    assert webhook_tally(h)["whe_a"] == {"requests": 4, "acknowledged": 2, **NONE, "lost": 1}
    assert webhook_tallied(webhook_tally(h), h) == ["webhook whe_a: lost: 1, e.g. [(2, 'en-US')]"]
    assert not caught_up(h)


def test_a_cursor_that_goes_back_is_out_of_order_though_every_message_keeps_its_id():
    # A dispatcher that never stored the cursor: its successor starts again from the first message.
    h = hooked([*HOOKED, *HOOKED[1:3], HOOKED[4]])
    counts = webhook_tally(h)["whe_a"]
    assert counts == {"requests": 8, "acknowledged": 3, **NONE, "out of order": 1}
    assert webhook_tallied(webhook_tally(h), h) == [
        """webhook whe_a: out of order: 1, e.g. ["msg_e_0_4_de-DE arrived after (4, 'en-US') on partition 0"]"""
    ]


def test_a_message_sent_again_under_another_id_is_doubled_and_with_other_bytes_changed():
    again = request((1, "en-US"), (0, 5))  # the same announcement at another position: another id
    newer = request((2, "en-US"), (1, 7), title="other")  # one id, other bytes (the post as it is now)
    h = hooked([*HOOKED, again])
    assert webhook_tally(h)["whe_a"] == {"requests": 6, "acknowledged": 3, **NONE, "doubled": 1}
    h = hooked([*HOOKED, again, newer])
    assert webhook_tally(h)["whe_a"] == {"requests": 7, "acknowledged": 3, **NONE, "doubled": 1, "changed": 1}
    moved = request((2, "en-US"), (1, 8), wid="msg_e_1_7_en-US")  # one id naming another position
    assert webhook_tally(hooked([*HOOKED, moved]))["whe_a"]["changed"] == 1
    assert [v.split(",")[0] for v in webhook_tallied(webhook_tally(h), h)] == [
        "webhook whe_a: doubled: 1",
        "webhook whe_a: changed: 1",
    ]


def test_a_bad_signature_and_an_announcement_outside_the_filter_or_aborted_are_counted():
    h = hooked(
        [
            *HOOKED,
            request((1, "en-US"), (0, 4), BAD_SIGNATURE),
            request((9, "en-US"), (1, 9)),  # of an aborted transaction
        ],
        langs=("de-DE", "en-US"),
    )
    h.endpoints["whe_b"] = ("de-DE",)
    h.hook("whe_b", HOOKED[1])
    h.hook("whe_b", HOOKED[2])  # en-US: outside the filter
    counts = webhook_tally(h)
    assert counts["whe_a"] == {"requests": 6, "acknowledged": 4, **NONE, "bad signatures": 1, "unexpected": 1}
    assert counts["whe_b"] == {"requests": 2, "acknowledged": 2, **NONE, "unexpected": 1}
    assert [v.split(",")[0] for v in webhook_tallied(counts, h)] == [
        "webhook whe_a: bad signatures: 1",
        "webhook whe_a: unexpected: 1",
        "webhook whe_b: unexpected: 1",
    ]


def capped(*spans: tuple[float, float]) -> History:
    h = History(seed=5)
    h.capped = [(a, b, f"c{n}") for n, (a, b) in enumerate(spans)]
    return h


#: Five connections open from 0 to 10 s.
FIVE = [(0.0, 10.0)] * 5


def test_a_sixth_connection_open_past_the_grace_exceeds_the_cap_and_a_moment_does_not():
    # The sixth opens as another closes (closed first at the same instant), or overlaps 0.5 s.
    assert stream_cap(capped(*FIVE[:4], (0.0, 4.0), (4.0, 9.0)), 5) == []
    assert stream_cap(capped(*FIVE[:4], (0.0, 4.5), (4.0, 9.0)), 5) == []
    assert most_open(capped(*FIVE[:4], (0.0, 4.5), (4.0, 9.0)).capped) == 5
    # Six at once for 3 s: what a limit counted per process lets in.
    h = capped(*FIVE, (2.0, 5.0))
    assert stream_cap(h, 5) == [
        "stream cap: 6 or more connections of the capped workspace open at once from 2.0s to 5.0s (limit 5)"
    ]
    assert most_open(h.capped) == 6


def test_more_than_the_limit_served_in_one_minute_overspends_it_and_unsure_requests_do_not_count():
    h = History(seed=5)
    minute = 29_000_000 * 60.0
    h.spent = [(minute + n * 0.5, minute + n * 0.5 + 0.1, 200) for n in range(60)]
    h.spent += [(minute + 59.9, minute + 60.2, 200)]  # answered in the next minute: which window is unsure
    h.spent += [(minute + 40.0, minute + 40.1, 429), (minute + 41.0, minute + 44.1, 0)]
    assert rate_limit(h, 60) == []
    assert limits_tally(h)["rated most served in a minute"] == 60
    assert limits_tally(h)["rated statuses"] == {"0": 1, "200": 61, "429": 1}
    h.spent.append((minute + 50.0, minute + 50.2, 200))  # a 61st surely in the minute
    (violation,) = rate_limit(h, 60)
    assert violation.startswith("rate limit: 61 requests of the rated workspace served in the minute starting ")
