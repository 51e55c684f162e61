"""The client library's pure logic: parsing, errors, retry policy, the consistency mark,
and the per-locale merge of pushes and gap-fill pages (exactly once, in order)."""

from __future__ import annotations

import inspect
import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tickerwire_client import (
    ApiError,
    AsyncClient,
    BadgeMissing,
    ChangesPage,
    Exchange,
    LogMark,
    LogPosition,
    NotAuthenticated,
    NotFound,
    Page,
    PostDetail,
    QuotaExhausted,
    RateLimited,
    ResponseMeta,
    RetryPolicy,
    Sentiment,
    ServerError,
    ServiceUnavailable,
    TokenDetail,
    ValidationFailed,
    WebhookAttempt,
    WebhookAttemptList,
    WebhookEndpoint,
    WebhookEndpointChanges,
    WebhookEndpointList,
    WorkspaceSuspended,
)
from tickerwire_client.errors import ClientError, error_from_response
from tickerwire_client.models import PostLean
from tickerwire_client.ordering import LocaleLine
from tickerwire_client.retry import Backoff, full_jitter
from tickerwire_client.stream import stream_endpoint

OPENAPI = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "openapi.json").read_text())
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def lean(post_id: int, lang: str = "en-US", at: datetime | None = None, **extra) -> dict:
    at = at or T0 + timedelta(seconds=post_id)
    return (
        dict(
            id=post_id,
            slug=f"p-{post_id}",
            published_at=at.isoformat().replace("+00:00", "Z"),
            lang=lang,
            canonical_url=f"https://n.example/{post_id}",
            title=f"Post {post_id}",
            lede="L.",
            cover_image_url="https://img.example/c.jpg",
            categories=[{"slug": "defi-lending", "name": "Lending"}],
            importance=50,
            sentiment="BULLISH",
        )
        | extra
    )


def post(post_id: int, **kw) -> PostLean:
    return PostLean.from_dict(lean(post_id, **kw))


# ---------------------------------------------------------------------------------------------- models


def test_models_follow_the_openapi_document_field_for_field():
    schemas = OPENAPI["components"]["schemas"]
    pairs = {"PostLean": PostLean, "PostDetail": PostDetail, "TokenDetail": TokenDetail}
    for name, cls in pairs.items():
        fields = {f for f in cls.__dataclass_fields__} - {"extra", "meta"}
        assert fields == set(schemas[name]["properties"]), name
    assert {"posts", "next_cursor", "prev_cursor"} == set(schemas["PostPage"]["properties"])


@pytest.mark.parametrize(
    "name, cls",
    [
        ("ChangesPage", ChangesPage),
        ("WebhookEndpoint", WebhookEndpoint),
        ("WebhookEndpointList", WebhookEndpointList),
        ("WebhookAttempt", WebhookAttempt),
        ("WebhookAttemptList", WebhookAttemptList),
    ],
)
def test_the_changes_and_webhook_models_have_every_field_of_their_schema(name, cls):
    fields = {f for f in cls.__dataclass_fields__} - {"extra", "meta"}
    schema = set(OPENAPI["components"]["schemas"][name]["properties"])
    assert schema <= fields, f"{name}: the model lacks {schema - fields}"
    assert fields <= schema, f"{name}: the schema lacks {fields - schema}"


def test_the_create_and_update_arguments_are_the_fields_of_their_bodies():
    create = set(inspect.signature(AsyncClient.create_webhook_endpoint).parameters) - {"self", "idempotency_key"}
    update = set(WebhookEndpointChanges.__annotations__)
    schemas = OPENAPI["components"]["schemas"]
    for name, arguments in (("WebhookEndpointCreate", create), ("WebhookEndpointUpdate", update)):
        assert arguments == set(schemas[name]["properties"]), name


def test_unknown_fields_and_enum_values_are_kept_not_refused():
    p = PostLean.from_dict(lean(7, sentiment="EUPHORIC", reading_time=3))
    assert p.sentiment == "EUPHORIC" and not isinstance(p.sentiment, Sentiment)
    assert p.extra == {"reading_time": 3}
    assert PostLean.from_dict(lean(8)).sentiment is Sentiment.BULLISH
    token = TokenDetail.from_dict(
        dict(
            ticker="X",
            name="X",
            logo_url="https://l.example/x.png",
            post_count=0,
            market_cap_rank=None,
            exchange_listings=["binance", "newdex"],
            categories=[],
            genesis_date="2020-01-02",
            primary_ecosystem={"slug": "ecosystems-ton", "name": "TON"},
            homepage_url="https://x.example",
            description=None,
            audited=True,
        )
    )
    assert token.exchange_listings == [Exchange.BINANCE, "newdex"]
    assert token.primary_ecosystem.slug == "ecosystems-ton" and token.extra == {"audited": True}
    assert token.genesis_date.isoformat() == "2020-01-02"


def test_a_page_carries_its_limits_and_consistency_mark():
    headers = {
        "X-RateLimit-Limit": "60",
        "X-RateLimit-Remaining": "59",
        "X-RateLimit-Reset": "1767225660",
        "X-Quota-Limit": "5000",
        "X-Quota-Remaining": "4990",
        "X-Quota-Reset": "1767312000",
        "X-Log-Position": "0:1523,1:1490,2:1611",
        "ETag": '"abc"',
    }
    page = Page.from_dict(
        {"posts": [lean(2), lean(1)], "next_cursor": "1", "prev_cursor": None}, ResponseMeta.from_headers(200, headers)
    )
    limits = page.meta.limits
    assert (limits.rate_limit, limits.rate_remaining, limits.quota_remaining, limits.quota_reset) == (
        60,
        59,
        4990,
        1767312000,
    )
    assert page.meta.log_position.offsets == {0: 1523, 1: 1490, 2: 1611}
    assert [p.id for p in page.posts] == [2, 1]
    bare = ResponseMeta.from_headers(200, {})  # today's server, or an uncounted response
    assert bare.log_position is None and bare.limits.rate_limit is None


def test_the_consistency_mark_covers_a_push_only_past_its_offset():
    position = LogPosition.parse("0:10,1:5")
    assert position.covers(LogMark.parse("0:9")) and not position.covers(LogMark.parse("0:10"))
    assert not position.covers(LogMark(3, 0))  # a partition the read has not seen
    assert LogPosition.parse("0:1,garbage") is None and LogPosition.parse("") is None
    assert LogMark.parse("nope") is None and LogMark.parse(None) is None and str(LogMark(2, 7)) == "2:7"


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (401, "NOT_AUTHENTICATED", NotAuthenticated),
        (403, "WORKSPACE_SUSPENDED", WorkspaceSuspended),
        (403, "BADGE_MISSING", BadgeMissing),
        (404, "NOT_FOUND", NotFound),
        (422, "VALIDATION_FAILED", ValidationFailed),
        (429, "RATE_LIMITED", RateLimited),
        (429, "QUOTA_EXHAUSTED", QuotaExhausted),
        (503, "SERVICE_UNAVAILABLE", ServiceUnavailable),
        (418, "SOMETHING_NEW", ClientError),
        (502, None, ServerError),
    ],
)
def test_every_error_envelope_maps_to_its_exception(status, code, cls):
    body = {"error": {"code": code, "message": "m", "field": "sentiment"}} if code else "<html>bad gateway</html>"
    error = error_from_response(status, body, {})
    assert type(error) is cls and isinstance(error, ApiError) and error.status == status
    if code:
        assert error.field == "sentiment" and error.code == code


def test_retry_after_prefers_the_header_over_the_body():
    body = {"error": {"code": "RATE_LIMITED", "message": "m", "retry_after_sec": 40}}
    assert error_from_response(429, body, {"Retry-After": "7"}).retry_after == 7
    assert error_from_response(429, body, {}).retry_after == 40


def test_retry_policy_is_bounded_by_attempts_and_total_wait():
    policy = RetryPolicy(max_attempts=3, max_total_wait=10)
    assert policy.delay(1, 2.0, waited=0) == 2.0
    assert policy.delay(3, 2.0, waited=0) is None  # the third attempt was the last
    assert policy.delay(1, 3600.0, waited=0) is None  # a long Retry-After (quota) is raised, not slept on
    assert policy.delay(2, 4.0, waited=7.0) is None
    assert 0 <= policy.delay(1, None, waited=0) <= policy.backoff_base
    assert RetryPolicy(max_attempts=1).delay(1, 0.1, 0) is None


def test_backoffs_are_capped_and_jittered():
    rng = random.Random(1)
    assert all(0 <= full_jitter(n, 0.25, 5.0, rng) <= min(5.0, 0.25 * 2 ** (n - 1)) for n in range(1, 30))
    backoff = Backoff(base=0.5, cap=4.0)
    delays = [backoff.next() for _ in range(12)]
    assert all(0.25 <= d <= 4.0 for d in delays) and max(delays[5:]) > 2.0 and len(set(delays)) > 1
    backoff.reset()
    assert backoff.next() <= 0.5


def test_the_stream_url_carries_the_key_and_the_filters_only_once():
    url = stream_endpoint("ws://h:8081/api/v1/developer/stream?key=old", "tw_live_k", {"lang": "en-US,de-DE"})
    assert url == "ws://h:8081/api/v1/developer/stream?key=tw_live_k&lang=en-US%2Cde-DE"
    assert stream_endpoint("wss://h/api/v1/developer/", "k", {}) == "wss://h/api/v1/developer/stream?key=k"


# ---------------------------------------------------------------------------------------------- the merge


def ids(items) -> list[int]:
    return [i.post.id for i in items]


def test_pushes_out_of_commit_order_are_released_in_order_after_the_window():
    line = LocaleLine("en-US", cursor=100, window=0.5)
    assert line.push(post(103), LogMark(1, 0), now=0.0) == []
    assert line.push(post(102), LogMark(0, 0), now=0.1) == []
    assert line.push(post(102), LogMark(0, 0), now=0.2) == []  # the same push twice
    assert line.release(now=0.4) == []
    out = line.release(now=0.5)  # 103 is due, and 102 sorts before it
    assert ids(out) == [102, 103] and not any(i.late for i in out)
    assert line.cursor == 103 and line.counters.duplicates_dropped == 1
    late = line.push(post(101), None, now=1.0) + line.release(now=2.0)
    assert ids(late) == [101] and late[0].late  # still delivered, flagged, cursor unchanged
    assert line.cursor == 103
    assert line.push(post(103), None, now=3.0) == []  # already delivered


def test_a_zero_window_delivers_each_push_at_once():
    line = LocaleLine("en-US", cursor=None, window=0.0)
    assert ids(line.push(post(5), None, now=0.0)) == [5]
    assert ids(line.push(post(6), None, now=0.0)) == [6]


def test_pushes_wait_for_the_gap_fill_and_duplicates_between_them_are_dropped():
    line = LocaleLine("de-DE", cursor=10, window=0.0)
    assert line.begin_fill() == 10
    # Pushes arriving during the gap-fill wait, even with a zero window.
    assert line.push(post(14, lang="de-DE"), LogMark(0, 40), now=0.0) == []
    assert line.push(post(15, lang="de-DE"), LogMark(1, 7), now=0.0) == []
    page = [post(i, lang="de-DE") for i in (14, 13, 12, 11)]  # after=10: newest first
    out = line.fill_page(page)
    assert ids(out) == [11, 12, 13, 14] and {i.source for i in out} == {"gap_fill"}
    # The final read reflected 0:40 but not 1:7: 15 is released after the fill, 14 was a duplicate.
    out = line.end_fill(LogPosition({0: 41, 1: 7}), now=0.0)
    assert ids(out) == [15] and out[0].source == "stream"
    assert line.counters.duplicates_dropped == 1 and line.cursor == 15


def test_a_covered_push_is_released_when_the_gap_fill_ends_without_waiting_its_window():
    line = LocaleLine("en-US", cursor=20, window=30.0)
    line.begin_fill()
    assert line.push(post(19), LogMark(2, 5), now=0.0) == []  # older than the cursor: not in the fill
    assert line.push(post(22), LogMark(2, 9), now=0.0) == []
    assert ids(line.fill_page([post(21)])) == [21]
    out = line.end_fill(LogPosition({2: 6}), now=0.1)  # covers 2:5 only
    assert ids(out) == [19] and out[0].late
    assert line.waiting == 1 and ids(line.release(now=30.0)) == [22]


def test_every_post_once_and_in_order_for_any_interleaving_of_pushes_and_fills():
    """Batches committed across partitions (pushed in any order, sometimes twice) and
    disconnects that lose part of a batch's pushes, each followed by a gap-fill that reads
    what has been committed, page by page."""
    for seed in range(300):
        rng = random.Random(seed)
        published = list(range(1, 61))
        line = LocaleLine("en-US", cursor=0, window=1.0)
        seen: list[int] = []
        now, committed = 0.0, 0
        while committed < len(published) or line.waiting:
            now += 0.25
            if committed < len(published):
                batch = published[committed : committed + rng.randint(1, 4)]
                committed += len(batch)
                pushes = rng.sample(batch, k=len(batch))  # committed across partitions in any order
                pushes += rng.sample(pushes, k=rng.randint(0, 1))  # a push received twice
                disconnect = rng.random() < 0.15
                if disconnect:
                    pushes = pushes[: rng.randint(0, len(pushes))]  # the connection drops mid-batch
                for p in pushes:
                    seen += ids(line.push(post(p), None, now))
                if disconnect:  # reconnect: one gap-fill of everything committed after the cursor
                    cursor = line.begin_fill()
                    newer = [p for p in published[:committed] if p > cursor]
                    for start in range(0, len(newer), 5):  # pages of 5, each newest first
                        seen += ids(line.fill_page([post(p) for p in reversed(newer[start : start + 5])]))
                    seen += ids(line.end_fill(None, now))
            seen += ids(line.release(now))
        assert seen == published, seed
        assert line.counters.late == 0


def test_stream_locales_take_the_case_the_api_answers_with():
    from tickerwire_client.stream import bcp47_case

    assert [bcp47_case(t) for t in ("de-de", "EN-us", "zh-hans-cn", "pt-BR", "fr")] == [
        "de-DE",
        "en-US",
        "zh-Hans-CN",
        "pt-BR",
        "fr",
    ]


def test_an_interrupted_gap_fill_resumes_where_it_had_read_to_not_after_newer_pushes():
    line = LocaleLine("en-US", cursor=10, window=0.0)
    assert line.begin_fill() == 10
    assert ids(line.fill_page([post(i) for i in (14, 13, 12, 11)])) == [11, 12, 13, 14]
    line.fill_progress(14)
    line.abort_fill()  # refused for the rate limit: pushes flow meanwhile
    assert ids(line.push(post(30), None, now=1.0)) == [30] and line.cursor == 30
    assert line.begin_fill() == 14  # the rest of the gap, not after 30
    rest = line.fill_page([post(i) for i in (16, 15)])
    assert ids(rest) == [15, 16] and all(i.late for i in rest)  # late, never lost
    line.fill_progress(16)
    line.abort_fill()  # the connection is lost: the next connection's fill resumes it too
    assert line.begin_fill() == 16
    assert line.fill_page([post(30)]) == [] and ids(line.end_fill(None, now=2.0)) == []
    assert line.begin_fill() == 30  # a completed fill: the next starts after the newest delivered


def test_time_the_reader_could_not_read_does_not_count_against_a_push_window():
    line = LocaleLine("en-US", cursor=100, window=0.5)
    assert line.push(post(103), None, now=0.0) == []
    line.postpone(2.0)  # the application's queue was full for 2 s: frames waited in the socket
    assert line.release(now=1.0) == []
    assert line.push(post(102), None, now=1.0) == []  # read once the queue had room
    out = line.release(now=2.5)
    assert ids(out) == [102, 103] and not any(i.late for i in out)
