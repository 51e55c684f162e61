"""The partner's read-only view of its webhook endpoints (docs/api.md#webhooks), in process over a
real read model: the endpoints the projector applied from ``webhook_endpoint`` events, joined with
the dispatcher's delivery rows and attempts (written here as the dispatcher would). Only the key's
workspace's endpoints are ever shown; every answer validates against the OpenAPI document."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import asyncpg
import jsonschema
import orjson
import pytest

from tests.support.apps import ReadModel, api_served
from tests.support.events import webhook_endpoint_ev
from tests.support.stack import BASE, auth
from tickerwire.devstack.demo import dataset
from tickerwire.devstack.embedded.postgres import scratch_database

DOC = orjson.loads((Path(__file__).resolve().parents[2] / "schemas" / "openapi.json").read_bytes())
NOW = datetime.now(timezone.utc).replace(microsecond=0)
CURSOR = "c1~abc123~0.4~1.2.en-US"
ENDPOINT_KEYS = [
    "id",
    "url",
    "description",
    "filters",
    "status",
    "disabled_reason",
    "disabled_at",
    "failing_since",
    "next_attempt_at",
    "attempt",
    "delivered",
    "last_delivered_at",
    "cursor",
    "created_at",
    "secret_generation",
]
ATTEMPT_KEYS = [
    "webhook_id",
    "type",
    "attempt",
    "attempted_at",
    "outcome",
    "status",
    "latency_ms",
    "error",
    "next_attempt_at",
    "response_excerpt",
]
ATTEMPTS = 30


def endpoint_event(endpoint_id: str, workspace: str, version: int, status: str = "active", **data):
    return webhook_endpoint_ev(endpoint_id, workspace, version, status, now=NOW, **data)


DELIVERIES = """
INSERT INTO webhook_deliveries (endpoint_id, cursor, delivered, state, disabled_reason, disabled_at, disabled_version,
                                failing_since, attempt, next_attempt_at, last_delivered_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
"""
ATTEMPT = """
INSERT INTO webhook_attempts (endpoint_id, webhook_id, attempt, attempted_at, outcome, status, latency_ms, error,
                              next_attempt_at, type, response_excerpt)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
"""


@dataclass
class Hooks:
    url: str
    key_a: str
    key_b: str
    http: aiohttp.ClientSession
    dsn: str

    async def get(self, path: str, key: str | None = None, params=None, status: int = 200):
        async with self.http.get(self.url + BASE + path, params=params, headers=auth(key or self.key_a)) as resp:
            body = orjson.loads(await resp.read())
            assert resp.status == status, (path, resp.status, body)
            return resp, body


@pytest.fixture(scope="module")
async def hooks(pg_dsn):
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn)
        await model.project([*dataset.catalog_events(3, now=NOW, tokens=10), *dataset.post_events(3, now=NOW, posts=5)])
        key_a = await model.provision("ws_hooks_a", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        key_b = await model.provision("ws_hooks_b", rate_limit_per_minute=1_000_000, daily_quota=1_000)
        await model.project(
            [
                endpoint_event("whe_retrying1", "ws_hooks_a", 1, locales=["en-US", "de-DE"], tickers=["BTC"]),
                endpoint_event("whe_disabled1", "ws_hooks_a", 2),
                endpoint_event("whe_resumed01", "ws_hooks_a", 3),
                endpoint_event("whe_removed01", "ws_hooks_a", 4, status="removed"),
                endpoint_event("whe_paused001", "ws_hooks_a", 5, status="paused", secret_generation=3),
                endpoint_event("whe_otherws01", "ws_hooks_b", 6),
            ]
        )
        conn = await model.conn()
        try:
            at = NOW - timedelta(minutes=10)
            await conn.executemany(
                DELIVERIES,
                [
                    ("whe_retrying1", CURSOR, 12, "active", None, None, None, at, 3, NOW + timedelta(minutes=5), at),
                    (
                        "whe_disabled1",
                        None,
                        0,
                        "disabled",
                        "the endpoint answered 410 Gone",
                        at,
                        2,
                        None,
                        1,
                        None,
                        None,
                    ),
                    # Disabled at version 2, resumed by an operator since (version 3): active again.
                    ("whe_resumed01", None, 0, "disabled", "failing for 5 days", at, 2, None, 0, None, None),
                    ("whe_otherws01", None, 7, "active", None, None, None, None, 0, None, at),
                ],
            )
            await conn.executemany(
                ATTEMPT,
                [
                    (
                        "whe_retrying1",
                        f"msg_{i:04d}",
                        1,
                        at + timedelta(seconds=i),
                        "delivered" if i % 3 else "failed",
                        200 if i % 3 else None,
                        float(i) if i % 3 else None,
                        None if i % 3 else "timed out after 15 s",
                        None if i % 3 else at + timedelta(seconds=i + 5),
                        "webhook.test" if i == ATTEMPTS - 1 else "post.created",
                        f"ok {i} \ufffd" if i % 3 else None,
                    )
                    for i in range(ATTEMPTS)
                ]
                + [("whe_otherws01", "msg_other", 1, at, "delivered", 204, 3.5, None, None, "post.created", "")],
            )
        finally:
            await conn.close()
        async with api_served(dsn) as api, aiohttp.ClientSession() as http:
            yield Hooks(api.url, key_a, key_b, http, dsn)


def validate(template: str, status: int, body: dict, method: str = "get") -> None:
    response = DOC["paths"][template][method]["responses"][str(status)]
    if "$ref" in response:
        response = DOC["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    schema = {**response["content"]["application/json"]["schema"], "components": DOC["components"]}
    errors = list(jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).iter_errors(body))
    assert not errors, (template, status, [e.message for e in errors[:3]])


async def test_the_list_holds_the_workspaces_endpoints_that_are_not_removed_with_their_state(hooks):
    _, body = await hooks.get("/webhooks/endpoints")
    validate("/webhooks/endpoints", 200, body)
    endpoints = {e["id"]: e for e in body["endpoints"]}
    # Oldest first; another workspace's and a removed one are not listed.
    assert [e["id"] for e in body["endpoints"]] == ["whe_paused001", "whe_resumed01", "whe_disabled1", "whe_retrying1"]
    assert all(list(e) == ENDPOINT_KEYS for e in body["endpoints"])
    retrying = endpoints["whe_retrying1"]
    assert retrying["filters"] == {"locales": ["en-US", "de-DE"], "tickers": ["BTC"], "categories": None}
    assert (retrying["status"], retrying["attempt"], retrying["delivered"], retrying["cursor"]) == (
        "active",
        3,
        12,
        CURSOR,
    )
    assert retrying["failing_since"] and retrying["next_attempt_at"] and retrying["last_delivered_at"]
    disabled = endpoints["whe_disabled1"]
    assert (disabled["status"], disabled["disabled_reason"]) == ("disabled", "the endpoint answered 410 Gone")
    assert disabled["disabled_at"] is not None and disabled["cursor"] is None
    resumed = endpoints["whe_resumed01"]
    assert (resumed["status"], resumed["disabled_reason"], resumed["disabled_at"]) == ("active", None, None)
    paused = endpoints["whe_paused001"]
    assert (paused["status"], paused["secret_generation"], paused["attempt"], paused["delivered"]) == (
        "paused",
        3,
        0,
        0,
    )
    assert b"whsec_" not in orjson.dumps(body) and "secret" not in " ".join(
        k for e in body["endpoints"] for k in e if k != "secret_generation"
    )
    _, other = await hooks.get("/webhooks/endpoints", hooks.key_b)
    assert [e["id"] for e in other["endpoints"]] == ["whe_otherws01"]


async def test_one_endpoint_and_another_workspaces_or_unknown_or_removed_id_is_the_same_404(hooks):
    _, listed = await hooks.get("/webhooks/endpoints")
    _, one = await hooks.get("/webhooks/endpoints/whe_disabled1")
    validate("/webhooks/endpoints/{id}", 200, one)
    assert one == next(e for e in listed["endpoints"] if e["id"] == "whe_disabled1")
    answers = []
    for path in (
        "/webhooks/endpoints/whe_otherws01",
        "/webhooks/endpoints/whe_nobody01",
        "/webhooks/endpoints/whe_removed01",
    ):
        _, body = await hooks.get(path, status=404)
        validate("/webhooks/endpoints/{id}", 404, body)
        answers.append(body)
        _, attempts = await hooks.get(path + "/attempts", status=404)
        validate("/webhooks/endpoints/{id}/attempts", 404, attempts)
        answers.append(attempts)
    assert answers[0]["error"]["code"] == "NOT_FOUND" and all(a == answers[0] for a in answers)
    _, own = await hooks.get("/webhooks/endpoints/whe_otherws01", hooks.key_b)  # its own workspace sees it
    assert own["id"] == "whe_otherws01" and own["delivered"] == 7


async def test_attempts_are_newest_first_bounded_by_limit(hooks):
    _, body = await hooks.get("/webhooks/endpoints/whe_retrying1/attempts")
    validate("/webhooks/endpoints/{id}/attempts", 200, body)
    assert [a["webhook_id"] for a in body["attempts"]] == [
        f"msg_{i:04d}" for i in range(ATTEMPTS - 1, ATTEMPTS - 21, -1)
    ]
    assert all(list(a) == ATTEMPT_KEYS for a in body["attempts"])
    newest, second = body["attempts"][0], body["attempts"][1]
    assert (newest["type"], newest["response_excerpt"]) == ("webhook.test", f"ok {ATTEMPTS - 1} \ufffd")
    assert (second["type"], second["response_excerpt"]) == ("post.created", f"ok {ATTEMPTS - 2} \ufffd")
    assert next(a for a in body["attempts"] if a["outcome"] == "failed")["response_excerpt"] is None
    failed = next(a for a in body["attempts"] if a["outcome"] == "failed")
    assert failed["status"] is None and failed["error"] == "timed out after 15 s" and failed["next_attempt_at"]
    delivered = next(a for a in body["attempts"] if a["outcome"] == "delivered")
    assert delivered["status"] == 200 and delivered["latency_ms"] is not None and delivered["error"] is None
    _, five = await hooks.get("/webhooks/endpoints/whe_retrying1/attempts", params={"limit": "5"})
    assert five["attempts"] == body["attempts"][:5]
    _, every = await hooks.get("/webhooks/endpoints/whe_retrying1/attempts", params={"limit": "100"})
    assert len(every["attempts"]) == ATTEMPTS
    _, none = await hooks.get("/webhooks/endpoints/whe_disabled1/attempts")
    assert none == {"attempts": []}
    for bad in ("0", "101", "x"):
        _, err = await hooks.get("/webhooks/endpoints/whe_retrying1/attempts", params={"limit": bad}, status=422)
        validate("/webhooks/endpoints/{id}/attempts", 422, err)
        assert (err["error"]["code"], err["error"]["field"]) == ("VALIDATION_FAILED", "limit")


async def test_each_request_counts_against_the_quota_and_needs_a_key(hooks):
    seen = []
    for path, status in (
        ("/webhooks/endpoints", 200),
        ("/webhooks/endpoints/whe_otherws01", 200),
        ("/webhooks/endpoints/whe_otherws01/attempts", 200),
        ("/webhooks/endpoints/whe_retrying1", 404),  # another workspace's: counted all the same
    ):
        resp, _ = await hooks.get(path, hooks.key_b, status=status)
        seen.append(int(resp.headers["X-Quota-Remaining"]))
        assert resp.headers["X-Log-Position"] and resp.headers["X-Quota-Limit"] == "1000"
    assert seen == [seen[0] - i for i in range(4)]
    async with hooks.http.get(hooks.url + BASE + "/webhooks/endpoints") as resp:
        assert resp.status == 401 and (await resp.json())["error"]["code"] == "NOT_AUTHENTICATED"


async def post_test(hooks: Hooks, endpoint_id: str, key: str | None = None, status: int = 202, **kwargs):
    path = f"/webhooks/endpoints/{endpoint_id}/test"
    async with hooks.http.post(hooks.url + BASE + path, headers=auth(key or hooks.key_a), **kwargs) as resp:
        body = orjson.loads(await resp.read())
        assert resp.status == status, (path, resp.status, body)
        validate("/webhooks/endpoints/{id}/test", status, body, "post")
        return resp, body


async def test_a_test_event_is_queued_numbered_per_endpoint_and_only_for_the_keys_deliverable_endpoints(hooks):
    _, first = await post_test(hooks, "whe_resumed01")
    _, second = await post_test(hooks, "whe_resumed01")
    assert [first, second] == [{"webhook_id": f"msg_test_whe_resumed01_{n}"} for n in (1, 2)]
    # Another workspace's, unknown or removed: the 404 every webhook read answers.
    answers = [
        (await post_test(hooks, endpoint_id, status=404))[1]
        for endpoint_id in ("whe_otherws01", "whe_nobody01", "whe_removed01")
    ]
    _, read_404 = await hooks.get("/webhooks/endpoints/whe_nobody01", status=404)
    assert all(a == read_404 for a in answers)
    for endpoint_id in ("whe_paused001", "whe_disabled1"):  # nothing is sent to them: refused
        _, refused = await post_test(hooks, endpoint_id, status=409)
        assert refused["error"]["code"] == "INVALID_STATE" and "resume it" in refused["error"]["message"]
    _, body = await post_test(hooks, "whe_resumed01", status=400, data=b'{"x":1}')
    assert body["error"]["code"] == "VALIDATION_FAILED"
    conn = await asyncpg.connect(hooks.dsn)
    try:
        rows = await conn.fetch("SELECT endpoint_id, n, sent_at FROM webhook_tests ORDER BY endpoint_id, n")
        assert [(r["endpoint_id"], r["n"], r["sent_at"]) for r in rows] == [
            ("whe_resumed01", 1, None),
            ("whe_resumed01", 2, None),
        ]
        for n in range(8):  # 10 waiting at most
            await post_test(hooks, "whe_resumed01")
        _, full = await post_test(hooks, "whe_resumed01", status=409)
        assert "10 test events are waiting" in full["error"]["message"]
        await conn.execute("UPDATE webhook_tests SET sent_at = now()")  # as the dispatcher marks them
        _, next_one = await post_test(hooks, "whe_resumed01")
        assert next_one == {"webhook_id": "msg_test_whe_resumed01_11"}
    finally:
        await conn.close()


async def test_a_test_event_request_counts_against_the_quota_and_needs_a_key(hooks):
    before, _ = await hooks.get("/webhooks/endpoints/whe_otherws01", hooks.key_b)
    resp, body = await post_test(hooks, "whe_otherws01", hooks.key_b)
    assert body == {"webhook_id": "msg_test_whe_otherws01_1"}
    assert int(resp.headers["X-Quota-Remaining"]) == int(before.headers["X-Quota-Remaining"]) - 1
    assert resp.headers["X-Log-Position"] and resp.headers["Cache-Control"] == "no-store"
    async with hooks.http.post(hooks.url + BASE + "/webhooks/endpoints/whe_otherws01/test") as resp:
        assert resp.status == 401 and (await resp.json())["error"]["code"] == "NOT_AUTHENTICATED"
