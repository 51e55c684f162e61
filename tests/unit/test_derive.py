"""Pure derivations: how a post change moves post_count and the sentiment buckets."""

from datetime import datetime, timezone

from tickerwire.services.projector.derive import PostFacts, minute_bucket, sentiment_deltas, ticker_deltas

T = datetime(2026, 11, 20, 12, 30, 45, tzinfo=timezone.utc)


def facts(status="published", tickers=("BTC", "ETH"), sentiment="BULLISH", at=T):
    return PostFacts(status, at, sentiment, tickers)


def test_new_live_post_counts_each_ticker_once():
    assert ticker_deltas(None, facts(tickers=("BTC", "BTC", "ETH"))) == {"BTC": 1, "ETH": 1}


def test_queued_and_publishing_are_live_but_draft_is_not():
    assert ticker_deltas(None, facts(status="queued", at=None)) == {"BTC": 1, "ETH": 1}
    assert ticker_deltas(None, facts(status="publishing", at=None)) == {"BTC": 1, "ETH": 1}
    assert ticker_deltas(None, facts(status="draft", at=None)) == {}


def test_retraction_removes_counts_and_bucket():
    assert ticker_deltas(facts(), facts(status="retracted")) == {"BTC": -1, "ETH": -1}
    assert sentiment_deltas(facts(), facts(status="retracted")) == {(minute_bucket(T), "BULLISH"): -1}


def test_ticker_change_moves_only_the_difference():
    assert ticker_deltas(facts(tickers=("BTC", "ETH")), facts(tickers=("ETH", "SOL"))) == {"BTC": -1, "SOL": 1}


def test_unchanged_post_moves_nothing():
    assert ticker_deltas(facts(), facts()) == {}
    assert sentiment_deltas(facts(), facts()) == {}


def test_sentiment_change_moves_between_buckets():
    assert sentiment_deltas(facts(), facts(sentiment="BEARISH")) == {
        (minute_bucket(T), "BULLISH"): -1,
        (minute_bucket(T), "BEARISH"): 1,
    }


def test_queued_post_is_live_but_not_in_the_pulse():
    assert sentiment_deltas(None, facts(status="queued", at=None)) == {}


def test_published_at_change_moves_minute():
    later = T.replace(minute=45)
    assert sentiment_deltas(facts(), facts(at=later)) == {
        (minute_bucket(T), "BULLISH"): -1,
        (minute_bucket(later), "BULLISH"): 1,
    }
