"""The webhook endpoint operations and ``changes`` of the Python client against a local fake HTTP
server on 127.0.0.1 (pure client logic: tests/clients/test_client_webhooks_live.py runs them against
the real API).

Each operation's request (method, path, query, headers, body) and the decoding of its answer,
the Idempotency-Key of a create (kept over the call's retries, so a lost 201 is retried safely),
which writes are retried after what, the errors of the new 409 codes, and the walk of /changes.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pytest
from aiohttp import web

from tickerwire_client import (
    AsyncClient,
    AttemptOutcome,
    AttemptType,
    Client,
    CursorEpochChanged,
    EndpointLimitReached,
    IdempotencyKeyReused,
    NotFound,
    RetryPolicy,
    ServiceUnavailable,
    TransportError,
    ValidationFailed,
    WebhookEndpoint,
    WebhookStatus,
)

KEY = "tw_live_" + "k" * 43
SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"
FAST = RetryPolicy(max_attempts=3, backoff_base=0.01, backoff_cap=0.02, max_total_wait=5, max_call_time=10)


def endpoint(**changes: Any) -> dict[str, Any]:
    return {
        "id": "whe_abc123",
        "url": "https://hooks.example/tw",
        "description": "Desk alerts",
        "filters": {"locales": ["en-US"], "tickers": None, "categories": None},
        "status": "active",
        "disabled_reason": None,
        "disabled_at": None,
        "failing_since": None,
        "next_attempt_at": None,
        "attempt": 0,
        "delivered": 3,
        "last_delivered_at": "2026-12-05T10:00:00.000Z",
        "cursor": "c1~5d71cd8b84d9~0.10",
        "created_at": "2026-12-01T09:00:00.000Z",
        "secret_generation": 1,
    } | changes


def attempt(**changes: Any) -> dict[str, Any]:
    return {
        "webhook_id": "msg_test_1",
        "type": "webhook.test",
        "attempt": 1,
        "attempted_at": "2026-12-05T10:00:00.000Z",
        "outcome": "failed",
        "status": 500,
        "latency_ms": 12.5,
        "error": "HTTP 500",
        "response_excerpt": "oops",
        "next_attempt_at": "2026-12-05T10:00:05.000Z",
    } | changes


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeApi:
    """Answers each request with the next scripted answer (status, JSON body or None, headers);
    ``"drop"`` closes the connection without answering. Records every request."""

    url: str = ""
    answers: list[Any] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def script(self, *answers: Any) -> None:
        self.answers[:] = list(answers)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(
            Seen(
                request.method,
                request.rel_url.raw_path,
                dict(request.query),
                dict(request.headers),
                await request.read(),
            )
        )
        answer = self.answers.pop(0)
        if answer == "drop":
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError  # the handler ends with the connection
        status, body, headers = (list(answer) + [{}])[:3]
        if body is None:
            return web.Response(status=status, headers=headers)
        return web.json_response(body, status=status, headers=headers)


@pytest.fixture
async def fake():
    api = FakeApi()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    api.url = f"http://127.0.0.1:{port}/api/v1/developer"
    yield api
    await runner.cleanup()


def client_of(fake: FakeApi, retry: RetryPolicy = FAST) -> AsyncClient:
    return AsyncClient(fake.url, KEY, retry=retry, timeout=5)


def error(status: int, code: str, field: str | None = None, headers: dict | None = None) -> tuple:
    envelope: dict[str, Any] = {"code": code, "message": "m"}
    if field:
        envelope["field"] = field
    return (status, {"error": envelope}, headers or {})


BASE = "/api/v1/developer/webhooks/endpoints"


# ---------------------------------------------------------------------------------------------- reads


async def test_the_reads_send_get_with_the_key_and_decode_typed_models(fake: FakeApi):
    fake.script(
        (200, {"endpoints": [endpoint(), endpoint(id="whe_def456", status="paused", description="")]}),
        (200, endpoint(status="disabled", disabled_reason="gone", disabled_at="2026-12-05T11:00:00Z")),
        (200, {"attempts": [attempt(), attempt(type="post.created", outcome="delivered", response_excerpt=None)]}),
    )
    async with client_of(fake) as client:
        listed = await client.webhook_endpoints()
        one = await client.webhook_endpoint("whe_abc123")
        attempts = await client.webhook_attempts("whe_abc123", limit=5)
    assert [(s.method, s.path, s.query) for s in fake.seen] == [
        ("GET", BASE, {}),
        ("GET", BASE + "/whe_abc123", {}),
        ("GET", BASE + "/whe_abc123/attempts", {"limit": "5"}),
    ]
    assert all(s.headers["Authorization"] == f"Bearer {KEY}" and s.body == b"" for s in fake.seen)
    first, second = listed.endpoints
    assert first.description == "Desk alerts" and first.filters.locales == ["en-US"] and first.filters.tickers is None
    assert first.status is WebhookStatus.ACTIVE and second.status is WebhookStatus.PAUSED and second.description == ""
    assert first.last_delivered_at == datetime(2026, 12, 5, 10, tzinfo=timezone.utc)
    assert listed.meta is not None and listed.meta.status == 200
    assert one.status is WebhookStatus.DISABLED and one.disabled_at == datetime(2026, 12, 5, 11, tzinfo=timezone.utc)
    test, delivered = attempts.attempts
    assert test.type is AttemptType.WEBHOOK_TEST and test.response_excerpt == "oops" and test.latency_ms == 12.5
    assert delivered.type is AttemptType.POST_CREATED and delivered.response_excerpt is None
    assert delivered.outcome is AttemptOutcome.DELIVERED


async def test_fields_an_older_server_does_not_send_take_the_contracts_none(fake: FakeApi):
    old = endpoint()
    del old["description"]
    old_attempt = attempt()
    del old_attempt["type"], old_attempt["response_excerpt"]
    fake.script((200, old), (200, {"attempts": [old_attempt | {"new_field": 1}]}))
    async with client_of(fake) as client:
        got = await client.webhook_endpoint("whe_abc123")
        attempts = await client.webhook_attempts("whe_abc123")
    assert got.description == ""
    (only,) = attempts.attempts
    assert only.type is AttemptType.POST_CREATED and only.response_excerpt is None and only.extra == {"new_field": 1}


async def test_an_endpoint_id_is_one_path_segment(fake: FakeApi):
    fake.script(error(404, "NOT_FOUND"))
    async with client_of(fake) as client:
        with pytest.raises(NotFound):
            await client.webhook_endpoint("whe_x/../../posts")
    assert fake.seen[0].path == BASE + "/whe_x%2F..%2F..%2Fposts"


# ---------------------------------------------------------------------------------------------- create


async def test_create_posts_the_given_fields_as_json_and_returns_the_secret_once(fake: FakeApi):
    fake.script((201, {"endpoint": endpoint(), "secret": SECRET}, {"Location": BASE + "/whe_abc123"}))
    async with client_of(fake) as client:
        created = await client.create_webhook_endpoint(
            "https://hooks.example/tw", description="Desk alerts", locales=["en-US"], tickers=("BTC", "ETH")
        )
    (seen,) = fake.seen
    assert (seen.method, seen.path) == ("POST", BASE)
    assert seen.headers["Content-Type"] == "application/json"
    assert json.loads(seen.body) == {
        "url": "https://hooks.example/tw",
        "description": "Desk alerts",
        "locales": ["en-US"],
        "tickers": ["BTC", "ETH"],
    }
    assert seen.headers["Idempotency-Key"].startswith("tw-")  # one the client made for this call
    assert created.secret == SECRET and isinstance(created.endpoint, WebhookEndpoint)
    assert created.meta is not None and created.meta.status == 201 and created.location == BASE + "/whe_abc123"
    assert SECRET not in repr(created)  # logging the result does not log the secret


async def test_a_create_whose_answer_was_lost_is_retried_with_the_same_key_and_body(fake: FakeApi):
    fake.script(
        "drop",
        error(503, "SERVICE_UNAVAILABLE", headers={"Retry-After": "0"}),
        (201, {"endpoint": endpoint(), "secret": SECRET}),
    )
    async with client_of(fake) as client:
        created = await client.create_webhook_endpoint("https://hooks.example/tw", idempotency_key="order-77")
    assert created.secret == SECRET and client.retries == 2
    assert [s.headers["Idempotency-Key"] for s in fake.seen] == ["order-77"] * 3
    assert len({s.body for s in fake.seen}) == 1 and json.loads(fake.seen[0].body) == {
        "url": "https://hooks.example/tw"
    }


async def test_two_creates_without_a_key_get_two_keys(fake: FakeApi):
    fake.script(*[(201, {"endpoint": endpoint(), "secret": SECRET})] * 2)
    async with client_of(fake) as client:
        await client.create_webhook_endpoint("https://hooks.example/a")
        await client.create_webhook_endpoint("https://hooks.example/a")
    first, second = (s.headers["Idempotency-Key"] for s in fake.seen)
    assert first != second


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there", " padded"])
async def test_a_key_the_server_would_refuse_is_refused_before_sending(fake: FakeApi, key: str):
    async with client_of(fake) as client:
        with pytest.raises(ValueError, match="Idempotency-Key"):
            await client.create_webhook_endpoint("https://hooks.example/a", idempotency_key=key)
    assert fake.seen == []


@pytest.mark.parametrize(
    "code, cls",
    [("IDEMPOTENCY_KEY_REUSED", IdempotencyKeyReused), ("ENDPOINT_LIMIT", EndpointLimitReached)],
)
async def test_the_creates_409s_are_their_own_errors_and_not_retried(fake: FakeApi, code: str, cls: type):
    fake.script(error(409, code))
    async with client_of(fake) as client:
        with pytest.raises(cls) as exc:
            await client.create_webhook_endpoint("https://hooks.example/a", idempotency_key="k1")
    assert exc.value.status == 409 and exc.value.code == code and len(fake.seen) == 1


async def test_an_unknown_field_refused_by_the_server_names_the_field(fake: FakeApi):
    fake.script(error(400, "VALIDATION_FAILED", field="colour"))
    async with client_of(fake) as client:
        with pytest.raises(ValidationFailed) as exc:
            await client.create_webhook_endpoint("https://hooks.example/a")
    assert exc.value.field == "colour" and exc.value.status == 400


# ---------------------------------------------------------------------------------------------- update, delete, states


async def test_update_sends_only_the_fields_given_and_none_as_null(fake: FakeApi):
    fake.script((200, endpoint(description="New", filters={"locales": None, "tickers": ["BTC"], "categories": None})))
    async with client_of(fake) as client:
        updated = await client.update_webhook_endpoint("whe_abc123", description="New", locales=None, tickers=["BTC"])
        with pytest.raises(ValueError, match="nothing to change"):
            await client.update_webhook_endpoint("whe_abc123")
    (seen,) = fake.seen
    assert (seen.method, seen.path, seen.headers["Content-Type"]) == ("PATCH", BASE + "/whe_abc123", "application/json")
    assert json.loads(seen.body) == {"description": "New", "locales": None, "tickers": ["BTC"]}
    assert updated.description == "New" and updated.filters.locales is None and updated.filters.tickers == ["BTC"]


async def test_delete_returns_the_meta_of_its_204(fake: FakeApi):
    fake.script((204, None, {"X-RateLimit-Remaining": "41"}))
    async with client_of(fake) as client:
        meta = await client.delete_webhook_endpoint("whe_abc123")
    assert (fake.seen[0].method, fake.seen[0].path, fake.seen[0].body) == ("DELETE", BASE + "/whe_abc123", b"")
    assert meta.status == 204 and meta.limits.rate_remaining == 41


async def test_pause_resume_rotate_and_test_post_without_a_body(fake: FakeApi):
    fake.script(
        (200, endpoint(status="paused")),
        (200, endpoint(status="active")),
        (200, {"endpoint": endpoint(secret_generation=2), "secret": SECRET}),
        (202, {"webhook_id": "msg_test_2b"}),
    )
    async with client_of(fake) as client:
        paused = await client.pause_webhook_endpoint("whe_abc123")
        resumed = await client.resume_webhook_endpoint("whe_abc123")
        rotated = await client.rotate_webhook_secret("whe_abc123")
        queued = await client.send_webhook_test("whe_abc123")
    assert [(s.method, s.path, s.body) for s in fake.seen] == [
        ("POST", BASE + "/whe_abc123/pause", b""),
        ("POST", BASE + "/whe_abc123/resume", b""),
        ("POST", BASE + "/whe_abc123/rotate-secret", b""),
        ("POST", BASE + "/whe_abc123/test", b""),
    ]
    assert all("Content-Type" not in s.headers and "Idempotency-Key" not in s.headers for s in fake.seen)
    assert paused.status is WebhookStatus.PAUSED and resumed.status is WebhookStatus.ACTIVE
    assert rotated.secret == SECRET and rotated.endpoint.secret_generation == 2
    assert queued.webhook_id == "msg_test_2b" and queued.meta is not None and queued.meta.status == 202


async def test_replay_takes_exactly_one_of_since_or_cursor(fake: FakeApi):
    fake.script((202, endpoint()), (202, endpoint()), (202, endpoint()))
    since = datetime(2026, 12, 5, 9, 30, tzinfo=timezone.utc)
    async with client_of(fake) as client:
        await client.replay_webhook_endpoint("whe_abc123", since=since)
        await client.replay_webhook_endpoint("whe_abc123", since="2026-12-05T09:30:00Z")
        replayed = await client.replay_webhook_endpoint("whe_abc123", cursor="c1~5d71cd8b84d9~0.4")
        for wrong in ({}, {"since": since, "cursor": "c1~x"}, {"since": datetime(2026, 12, 5)}):
            with pytest.raises(ValueError):
                await client.replay_webhook_endpoint("whe_abc123", **wrong)
    assert [(s.method, s.path) for s in fake.seen] == [("POST", BASE + "/whe_abc123/replay")] * 3
    assert [json.loads(s.body) for s in fake.seen] == [
        {"since": "2026-12-05T09:30:00+00:00"},
        {"since": "2026-12-05T09:30:00Z"},
        {"cursor": "c1~5d71cd8b84d9~0.4"},
    ]
    assert replayed.meta is not None and replayed.meta.status == 202


# ---------------------------------------------------------------------------------------------- retries


@pytest.mark.parametrize("operation", ["rotate_webhook_secret", "send_webhook_test", "replay_webhook_endpoint"])
async def test_a_write_that_acts_twice_is_not_retried_after_a_lost_answer_or_a_503(fake: FakeApi, operation: str):
    extra = {"cursor": "c1~x"} if operation == "replay_webhook_endpoint" else {}
    async with client_of(fake) as client:
        call = getattr(client, operation)
        fake.script("drop")
        with pytest.raises(TransportError):
            await call("whe_abc123", **extra)
        fake.script(error(503, "SERVICE_UNAVAILABLE", headers={"Retry-After": "0"}))
        with pytest.raises(ServiceUnavailable):
            await call("whe_abc123", **extra)
    assert len(fake.seen) == 2 and client.retries == 0


async def test_a_write_is_retried_after_a_429_which_the_server_answers_before_acting(fake: FakeApi):
    fake.script(error(429, "RATE_LIMITED", headers={"Retry-After": "0"}), (202, {"webhook_id": "msg_test_3"}))
    async with client_of(fake) as client:
        queued = await client.send_webhook_test("whe_abc123")
    assert queued.webhook_id == "msg_test_3" and len(fake.seen) == 2 and client.retries == 1


async def test_update_delete_pause_and_resume_are_retried_after_a_lost_answer(fake: FakeApi):
    fake.script("drop", (200, endpoint()), "drop", (204, None), "drop", (200, endpoint()), "drop", (200, endpoint()))
    async with client_of(fake) as client:
        await client.update_webhook_endpoint("whe_abc123", url="https://hooks.example/b")
        await client.delete_webhook_endpoint("whe_abc123")
        await client.pause_webhook_endpoint("whe_abc123")
        await client.resume_webhook_endpoint("whe_abc123")
    # Each sent twice (aiohttp itself may make the DELETE's second try, on a fresh connection).
    assert [s.method for s in fake.seen] == ["PATCH"] * 2 + ["DELETE"] * 2 + ["POST"] * 4


# ---------------------------------------------------------------------------------------------- changes


async def test_changes_sends_the_cursor_and_the_streams_filters(fake: FakeApi):
    page = {"posts": [], "cursor": "c1~5d71cd8b84d9~0.11", "has_more": False}
    fake.script((200, page))
    async with client_of(fake) as client:
        got = await client.changes("c1~5d71cd8b84d9~0.10", lang=["en-US", "de-DE"], tickers="BTC", limit=5)
    assert fake.seen[0].path == "/api/v1/developer/changes"
    assert fake.seen[0].query == {
        "cursor": "c1~5d71cd8b84d9~0.10",
        "lang": "en-US,de-DE",
        "tickers": "BTC",
        "limit": "5",
    }
    assert got.cursor == "c1~5d71cd8b84d9~0.11" and got.has_more is False and got.posts == []


async def test_iter_changes_passes_each_pages_cursor_on_and_ends_after_has_more_false(fake: FakeApi):
    fake.script(
        (200, {"posts": [], "cursor": "c1~e~0.2", "has_more": True}),
        (200, {"posts": [], "cursor": "c1~e~0.4", "has_more": True}),
        (200, {"posts": [], "cursor": "c1~e~0.5", "has_more": False}),
    )
    async with client_of(fake) as client:
        cursors = [page.cursor async for page in client.iter_changes("c1~e~0.0", categories=["defi"])]
    assert cursors == ["c1~e~0.2", "c1~e~0.4", "c1~e~0.5"]
    assert [s.query.get("cursor") for s in fake.seen] == ["c1~e~0.0", "c1~e~0.2", "c1~e~0.4"]
    assert all(s.query["categories"] == "defi" and s.query["limit"] == "50" for s in fake.seen)


async def test_a_cursor_of_an_earlier_log_is_its_own_error(fake: FakeApi):
    fake.script(error(409, "CURSOR_EPOCH_CHANGED", field="cursor"))
    async with client_of(fake) as client:
        with pytest.raises(CursorEpochChanged) as exc:
            await client.changes("c1~0000deadbeef~0.1")
    assert exc.value.field == "cursor"


# ---------------------------------------------------------------------------------------------- the blocking client


async def test_the_blocking_client_sends_the_same_requests(fake: FakeApi):
    fake.script(
        (201, {"endpoint": endpoint(), "secret": SECRET}),
        (202, endpoint()),
        (204, None),
    )

    def run() -> tuple[str, int]:
        with Client(fake.url, KEY, retry=FAST) as client:
            created = client.create_webhook_endpoint("https://hooks.example/a", idempotency_key="sync-1")
            client.replay_webhook_endpoint(created.endpoint.id, cursor="c1~x")
            with pytest.raises(ValueError):
                client.replay_webhook_endpoint(created.endpoint.id, since="2026-12-05T09:30:00Z", cursor="c1~x")  # type: ignore[call-overload]
            return created.secret, client.delete_webhook_endpoint(created.endpoint.id).status

    assert await asyncio.to_thread(run) == (SECRET, 204)
    assert [(s.method, s.path) for s in fake.seen] == [
        ("POST", BASE),
        ("POST", BASE + "/whe_abc123/replay"),
        ("DELETE", BASE + "/whe_abc123"),
    ]
    assert fake.seen[0].headers["Idempotency-Key"] == "sync-1"
