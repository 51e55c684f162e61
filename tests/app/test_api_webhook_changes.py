"""The partner's changes of its webhook endpoints over HTTP (docs/api.md#managing-endpoints),
with real parts end to end: the API in process publishes to the session's Kafka through its
producer, an in-process projector consumes the broker into a scratch PostgreSQL read model, and
each answer reflects the change (read your writes). No dispatcher runs: nothing is ever sent to
an endpoint URL, and every URL is loopback or refused before anything is published."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, AsyncIterator

import aiohttp
import asyncpg
import pytest
from aiokafka import TopicPartition

from tests.support.apps import ReadModel, Served, api_served, writable_stack
from tests.support.events import provisioning, webhook_endpoint_ev
from tests.support.stack import BASE, auth
from tickerwire.devstack.embedded.ports import free_ports
from tickerwire.schemas.topics import ACCESS, topic_name
from tickerwire.services.cli.publish import publish
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka
from tickerwire.services.common.db import connect
from tickerwire.services.webhooks.settings import new_signing_key

HOOK = "http://127.0.0.1:9/hook"  # loopback (opened, as `tickerwire up` opens it); nothing is ever sent
ENDPOINTS = f"{BASE}/webhooks/endpoints"


@dataclass
class Live:
    config: FullConfig
    api: Served
    http: aiohttp.ClientSession
    dsn: str

    def url(self, path: str) -> str:
        return self.api.url + path

    async def call(self, method: str, path: str, key: str, **kw: Any) -> tuple[int, Any, aiohttp.ClientResponse]:
        async with self.http.request(method, self.url(path), headers={**auth(key), **kw.pop("headers", {})}, **kw) as r:
            body = await r.json() if r.content_type == "application/json" else await r.read()
            return r.status, body, r

    async def workspace(self, workspace_id: str, endpoints: int = 0) -> str:
        """A provisioned workspace (and ``endpoints`` endpoints), published and projected; its key."""
        async with connect(self.dsn, schema="rm") as conn:
            key, events = await provisioning(conn, workspace_id, rate_limit_per_minute=100_000, daily_quota=1_000_000)
        hooks = [
            webhook_endpoint_ev(f"whe_{workspace_id.replace('_', '')}{i:04d}", workspace_id, 1, url=HOOK)
            for i in range(endpoints)
        ]
        await publish(self.config, events + hooks)
        await self.shown(
            "SELECT (SELECT count(*) FROM api_keys WHERE workspace_id = $1) = 1 "
            "AND (SELECT count(*) FROM webhook_endpoints WHERE workspace_id = $1) = $2",
            workspace_id,
            endpoints,
        )
        async with asyncio.timeout(20):
            # The badge sweep grants the badge once the heartbeat is projected (another partition
            # than the key's, maybe later); then the API's principals have it.
            while (await self.call("GET", ENDPOINTS, key))[0] != 200:
                await ReadModel(self.dsn, self.config.topic_prefix).sweep()
                await asyncio.sleep(0.1)
        return key

    async def shown(self, query: str, *args: Any, within: float = 30.0) -> None:
        conn = await asyncpg.connect(self.dsn, server_settings={"search_path": "rm,public"})
        try:
            async with asyncio.timeout(within):
                while not await conn.fetchval(query, *args):
                    await asyncio.sleep(0.05)
        finally:
            await conn.close()

    async def access_log_end(self) -> int:
        consumer = kafka.consumer(self.config, group_id=None, client_id="test-access-end")
        await consumer.start()
        try:
            topic = topic_name(self.config.topic_prefix, ACCESS)
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(ACCESS.partitions)])
            return sum(ends.values())
        finally:
            await consumer.stop()


@contextlib.asynccontextmanager
async def live_stack(dsn: str, bootstrap: str, prefix: str, **api_settings: Any) -> AsyncIterator[Live]:
    async with writable_stack(dsn, bootstrap, prefix, **api_settings) as (config, api), aiohttp.ClientSession() as http:
        yield Live(config, api, http, dsn)


@pytest.fixture
async def live(fresh_db, kafka_bootstrap, topic_prefix) -> AsyncIterator[Live]:
    async with live_stack(fresh_db, kafka_bootstrap, topic_prefix) as stack:
        yield stack


def one(endpoint_id: str, action: str = "") -> str:
    return f"{ENDPOINTS}/{endpoint_id}" + (f"/{action}" if action else "")


async def test_each_operation_answers_the_change_it_made(live: Live):
    key = await live.workspace("ws_ops")
    status, body, r = await live.call(
        "POST", ENDPOINTS, key, json={"url": HOOK, "description": "main", "tickers": ["btc", "ETH", "BTC"]}
    )
    assert status == 201, body
    endpoint, secret = body["endpoint"], body["secret"]
    endpoint_id = endpoint["id"]
    assert secret.startswith("whsec_") and r.headers["Location"] == one(endpoint_id)
    assert (endpoint["url"], endpoint["description"], endpoint["status"]) == (HOOK, "main", "active")
    assert endpoint["filters"] == {"locales": None, "tickers": ["BTC", "ETH"], "categories": None}
    assert endpoint["secret_generation"] == 1 and "X-RateLimit-Limit" in r.headers and "X-Log-Position" in r.headers
    assert (await live.call("GET", one(endpoint_id), key))[1] == endpoint  # read your writes

    status, body, _ = await live.call(
        "PATCH", one(endpoint_id), key, json={"description": "renamed", "tickers": None, "locales": ["en-us"]}
    )
    assert status == 200 and body["description"] == "renamed", body
    assert body["filters"] == {"locales": ["en-US"], "tickers": None, "categories": None}
    status, body, _ = await live.call("POST", one(endpoint_id, "pause"), key)
    assert (status, body["status"]) == (200, "paused")
    status, body, _ = await live.call("POST", one(endpoint_id, "resume"), key)
    assert (status, body["status"]) == (200, "active")
    status, body, _ = await live.call("POST", one(endpoint_id, "rotate-secret"), key)
    assert status == 200 and body["endpoint"]["secret_generation"] == 2
    assert body["secret"].startswith("whsec_") and body["secret"] != secret
    status, body, _ = await live.call("POST", one(endpoint_id, "replay"), key, json={"since": "2026-01-01T00:00:00Z"})
    assert (status, body["id"]) == (202, endpoint_id), body
    await live.shown("SELECT replay_seq = 1 FROM webhook_endpoints WHERE id = $1", endpoint_id, within=0.5)

    status, body, _ = await live.call("DELETE", one(endpoint_id), key)
    assert (status, body) == (204, b"")
    assert (await live.call("GET", one(endpoint_id), key))[0] == 404
    assert (await live.call("GET", ENDPOINTS, key))[1] == {"endpoints": []}
    for method, action in (("POST", "pause"), ("POST", "resume"), ("POST", "rotate-secret"), ("DELETE", "")):
        assert (await live.call(method, one(endpoint_id, action), key))[0] == 404, action


@pytest.mark.parametrize(
    ("request_kw", "status", "field"),
    [
        (dict(json={"url": HOOK, "colour": "red"}), 400, "colour"),
        (dict(json={"url": "ftp://127.0.0.1/x"}), 400, "url"),
        (dict(json={"url": HOOK, "description": "x" * 201}), 400, "description"),
        (dict(json={"url": HOOK, "tickers": [f"T{i}" for i in range(21)]}), 400, "tickers"),
        (dict(json={"url": HOOK, "locales": ["en_US"]}), 400, "locales"),
        (dict(json={"description": "no url"}), 400, "url"),
        (dict(json=["not", "an", "object"]), 400, "body"),
        (dict(data=b'{"url": "' + HOOK.encode() + b'"}', headers={"Content-Type": "text/plain"}), 400, "Content-Type"),
        (dict(json={"url": HOOK, "description": "y" * 9000}), 413, None),
        (dict(json={"url": HOOK}, headers={"Idempotency-Key": "ключ"}), 400, "Idempotency-Key"),
    ],
)
async def test_a_create_the_contract_refuses_names_the_field_and_publishes_nothing(
    live: Live, request_kw, status, field
):
    key = await live.workspace("ws_refused")
    before = await live.access_log_end()
    got, body, _ = await live.call("POST", ENDPOINTS, key, **request_kw)
    assert got == status and body["error"].get("field") == field, body
    assert body["error"]["code"] == ("VALIDATION_FAILED" if status == 400 else "PAYLOAD_TOO_LARGE")
    assert await live.access_log_end() == before


async def test_refused_changes_of_an_endpoint(live: Live):
    key = await live.workspace("ws_changes")
    endpoint_id = (await live.call("POST", ENDPOINTS, key, json={"url": HOOK}))[1]["endpoint"]["id"]
    cases = [
        ("PATCH", "", dict(json={}), "body"),
        ("PATCH", "", dict(json={"url": None}), "url"),
        ("PATCH", "", dict(json={"url": "http://10.0.0.1/x"}), "url"),
        ("POST", "replay", dict(json={}), "body"),
        ("POST", "replay", dict(json={"since": "2026-01-01T00:00:00Z", "cursor": "c1~x"}), "body"),
        ("POST", "replay", dict(json={"cursor": "c1~X"}), "cursor"),
        ("POST", "replay", dict(json={"since": "yesterday"}), "since"),
    ]
    for method, action, kw, field in cases:
        status, body, _ = await live.call(method, one(endpoint_id, action), key, **kw)
        assert (status, body["error"]["code"], body["error"].get("field")) == (400, "VALIDATION_FAILED", field), (
            kw,
            body,
        )
    # A cursor of another log: the 409 /changes gives it, so a partner's code handles both alike.
    status, body, _ = await live.call("POST", one(endpoint_id, "replay"), key, json={"cursor": "c1~0ther~0.1"})
    assert (status, body["error"]["code"], body["error"].get("field")) == (409, "CURSOR_EPOCH_CHANGED", "cursor"), body


async def test_another_workspace_gets_404_on_every_operation_and_sees_nothing(live: Live):
    owner, other = await live.workspace("ws_owner"), await live.workspace("ws_other")
    created = (await live.call("POST", ENDPOINTS, owner, json={"url": HOOK}))[1]["endpoint"]
    endpoint_id = created["id"]
    attempts = [
        ("GET", "", {}),
        ("GET", "attempts", {}),
        ("PATCH", "", dict(json={"description": "mine now"})),
        ("POST", "pause", {}),
        ("POST", "resume", {}),
        ("POST", "rotate-secret", {}),
        ("POST", "replay", dict(json={"since": "2026-01-01T00:00:00Z"})),
        ("DELETE", "", {}),
    ]
    before = await live.access_log_end()
    for method, action, kw in attempts:
        status, body, _ = await live.call(method, one(endpoint_id, action), other, **kw)
        assert (status, body["error"]["code"]) == (404, "NOT_FOUND"), (method, action, body)
        unknown = await live.call(method, one("whe_unknown0000", action), other, **kw)
        assert unknown[1] == body, (method, action)  # the same answer as an unknown id
    assert await live.access_log_end() == before
    assert (await live.call("GET", ENDPOINTS, other))[1] == {"endpoints": []}
    assert (await live.call("GET", one(endpoint_id), owner))[1] == created


async def test_a_create_retried_with_its_idempotency_key_answers_the_same_endpoint(live: Live):
    key = await live.workspace("ws_idem")
    request = {"url": HOOK, "description": "retried"}
    first = await live.call("POST", ENDPOINTS, key, json=request, headers={"Idempotency-Key": "create-1"})
    again = await live.call("POST", ENDPOINTS, key, json=request, headers={"Idempotency-Key": "create-1"})
    assert (first[0], again[0]) == (201, 201), (first[1], again[1])
    assert again[1] == first[1] and again[2].headers["Location"] == first[2].headers["Location"]
    other = await live.call(
        "POST", ENDPOINTS, key, json={**request, "description": "another"}, headers={"Idempotency-Key": "create-1"}
    )
    assert (other[0], other[1]["error"]["code"]) == (409, "IDEMPOTENCY_KEY_REUSED")
    listed = (await live.call("GET", ENDPOINTS, key))[1]["endpoints"]
    assert [e["id"] for e in listed] == [first[1]["endpoint"]["id"]]
    fresh = await live.call("POST", ENDPOINTS, key, json=request, headers={"Idempotency-Key": "create-2"})
    assert fresh[0] == 201 and fresh[1]["endpoint"]["id"] != first[1]["endpoint"]["id"]


async def test_twenty_concurrent_creates_at_95_endpoints_make_exactly_5(live: Live):
    key = await live.workspace("ws_cap", endpoints=95)
    answers = await asyncio.gather(
        *(live.call("POST", ENDPOINTS, key, json={"url": HOOK, "description": f"n{i}"}) for i in range(20))
    )
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [201] * 5 + [409] * 15, [(s, b) for s, b, _ in answers if s not in (201, 409)]
    assert {b["error"]["code"] for s, b, _ in answers if s == 409} == {"ENDPOINT_LIMIT"}
    assert len((await live.call("GET", ENDPOINTS, key))[1]["endpoints"]) == 100
    deleted = next(b["endpoint"]["id"] for s, b, _ in answers if s == 201)
    assert (await live.call("DELETE", one(deleted), key))[0] == 204
    assert (await live.call("POST", ENDPOINTS, key, json={"url": HOOK}))[0] == 201  # a deleted one frees its place


async def test_a_create_the_broker_does_not_take_gives_back_its_place_unless_a_key_holds_it(live: Live):
    """A second API whose broker address answers nothing (a closed loopback port): its creates
    reserve a place, fail to publish, and answer 503. Without a key the place is given back; with
    one it is held, counted against the cap, and the retry through a working API publishes the
    reserved endpoint (the same id), never a second one."""
    key = await live.workspace("ws_nobroker", endpoints=99)
    closed = f"127.0.0.1:{free_ports(1)[0]}"
    request = {"url": HOOK, "description": "while the broker is away"}
    held = {"Idempotency-Key": "create-away"}

    async def reserved() -> list[str]:
        async with connect(live.dsn, schema="rm") as conn:
            rows = await conn.fetch(
                "SELECT endpoint_id FROM webhook_reservations WHERE workspace_id = $1", "ws_nobroker"
            )
        return [r["endpoint_id"] for r in rows]

    async with api_served(
        live.dsn,
        kafka_bootstrap_servers=closed,
        topic_prefix=live.config.topic_prefix,
        webhooks_open_targets="loopback",
        webhooks_signing_key=new_signing_key(),
    ) as cut:
        cut_live = Live(live.config, cut, live.http, live.dsn)
        before = await live.access_log_end()
        status, body, _ = await cut_live.call("POST", ENDPOINTS, key, json=request)
        assert (status, body["error"]["code"]) == (503, "SERVICE_UNAVAILABLE"), body
        assert await reserved() == []
        status, body, _ = await cut_live.call("POST", ENDPOINTS, key, json=request, headers=held)
        assert (status, body["error"]["code"]) == (503, "SERVICE_UNAVAILABLE"), body
        [kept] = await reserved()
        assert await live.access_log_end() == before  # nothing reached the log
    # The held place counts: at 99 endpoints and one reservation, another create is refused.
    other = await live.call("POST", ENDPOINTS, key, json={"url": HOOK})
    assert (other[0], other[1]["error"]["code"]) == (409, "ENDPOINT_LIMIT"), other[1]
    status, body, _ = await live.call("POST", ENDPOINTS, key, json=request, headers=held)
    assert status == 201 and body["endpoint"]["id"] == kept, body
    assert len((await live.call("GET", ENDPOINTS, key))[1]["endpoints"]) == 100


async def test_on_a_stack_opened_to_loopback_only_other_private_addresses_are_refused(live: Live):
    key = await live.workspace("ws_targets")
    before = await live.access_log_end()
    for url in ("http://10.0.0.1/hook", "http://169.254.169.254/latest/meta-data", "http://[fc00::1]/hook"):
        status, body, _ = await live.call("POST", ENDPOINTS, key, json={"url": url})
        assert (status, body["error"]["code"], body["error"]["field"]) == (400, "VALIDATION_FAILED", "url"), body
        assert "TICKERWIRE_" not in body["error"]["message"]  # the operator's setting is not the partner's business
    assert await live.access_log_end() == before  # nothing published
    status, body, _ = await live.call("POST", ENDPOINTS, key, json={"url": "http://127.0.0.1:9/ok"})
    assert status == 201, body


async def test_without_a_signing_key_changes_answer_503_and_reads_still_work(fresh_db, kafka_bootstrap, topic_prefix):
    async with live_stack(fresh_db, kafka_bootstrap, topic_prefix, webhooks_signing_key="") as live:
        key = await live.workspace("ws_nokey")
        status, body, r = await live.call("POST", ENDPOINTS, key, json={"url": HOOK})
        assert (status, body["error"]["code"]) == (503, "SERVICE_UNAVAILABLE") and "signing key" in body["error"][
            "message"
        ]
        assert r.headers["Retry-After"] == "60"
        assert (await live.call("GET", ENDPOINTS, key))[0] == 200
        async with live.http.get(live.api.admin_url + "/readyz") as ready:
            assert ready.status == 200
