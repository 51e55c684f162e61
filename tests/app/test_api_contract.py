"""The OpenAPI 3.1 contract against the API app (in process, over a real PostgreSQL read model
the in-process projector filled): the document validates, real responses of every endpoint
validate against it, schemathesis finds nothing, and a client that knows only the document can
walk the post list both ways and gap-fill."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import jsonschema
import orjson
import pytest
import yaml
from openapi_spec_validator import validate as validate_spec

from tests.support.apps import ReadModel, writable_stack
from tests.support.events import visible_feed
from tests.support.stack import BASE, auth
from tickerwire.devstack.demo import dataset
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.services.readmodel import cursors

DOC_PATH = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"
FRESHNESS_REFUSAL = "No data as fresh as the X-Min-Log-Position sent is available yet; retry shortly."
NOW = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture(scope="module")
async def live(pg_dsn, kafka_bootstrap):
    # The webhook endpoint changes run for real: a broker, a projector applying the access topic
    # and a signing key, so schemathesis's creates, changes and deletes (stateful phase included)
    # reach the read model and are read back.
    prefix = f"t{uuid.uuid4().hex[:8]}"
    catalog = dataset.catalog_events(11, now=NOW, tokens=3000)
    posts = dataset.post_events(11, now=NOW, posts=250)
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn)
        await model.project([*catalog, *posts])
        key = await model.provision("ws_apicontract", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        async with writable_stack(dsn, kafka_bootstrap, prefix) as (_, api):
            async with aiohttp.ClientSession() as http:
                async with http.get(api.url + BASE + "/tokens", headers=auth(key)) as resp:
                    assert len((await resp.json())["tokens"]) == 3000  # the catalog is loaded before the app says ready
            yield api.url, key, posts


def test_document_is_valid_openapi_31():
    doc = orjson.loads(DOC_PATH.read_bytes())
    assert doc["openapi"].startswith("3.1")
    validate_spec(doc)
    assert set(doc["paths"]) == {
        "/posts",
        "/posts/{id_or_slug}",
        "/categories",
        "/categories/{slug}",
        "/tokens",
        "/tokens/{ticker}",
        "/sentiment-pulse",
        "/languages",
        "/search",
        "/changes",
        "/webhooks/endpoints",
        "/webhooks/endpoints/{id}",
        "/webhooks/endpoints/{id}/attempts",
        "/webhooks/endpoints/{id}/test",
        "/webhooks/endpoints/{id}/pause",
        "/webhooks/endpoints/{id}/resume",
        "/webhooks/endpoints/{id}/rotate-secret",
        "/webhooks/endpoints/{id}/replay",
    }


async def test_document_is_served_publicly(live):
    url, key, posts = live
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}{BASE}/openapi.json") as resp:  # no key
            assert resp.status == 200 and resp.content_type == "application/json"
            served = await resp.json()
    on_disk = orjson.loads(DOC_PATH.read_bytes())
    assert served["paths"] == on_disk["paths"] and served["components"] == on_disk["components"]
    assert served["servers"][0]["url"] == BASE


def _validator(doc: dict, path: str, status: str) -> jsonschema.Draft202012Validator:
    response = doc["paths"][path]["get"]["responses"][status]
    if "$ref" in response:
        response = doc["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    schema = {**response["content"]["application/json"]["schema"], "components": doc["components"]}
    # Refs in the document point at #/components/...; embedding the components makes them resolve.
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _declared_headers(doc: dict, path: str, status: str) -> set[str]:
    response = doc["paths"][path]["get"]["responses"][status]
    if "$ref" in response:
        response = doc["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    return set(response.get("headers", {}))


async def current_epoch(url: str, key: str) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(url + BASE + "/changes", headers=auth(key)) as resp:
            return cursors.decode((await resp.json())["cursor"]).epoch


async def test_real_responses_validate_against_the_document(live):
    url, key, posts = live
    doc = orjson.loads(DOC_PATH.read_bytes())
    post = visible_feed(posts)[0]
    calls = [
        ("/posts", "/posts", {}, "200"),
        ("/posts", "/posts", {"limit": "3", "before": str(post.id)}, "200"),
        ("/posts/{id_or_slug}", f"/posts/{post.id}", {}, "200"),
        ("/posts/{id_or_slug}", "/posts/missing", {}, "404"),
        ("/categories", "/categories", {"lang": "ja-JP"}, "200"),
        ("/categories/{slug}", "/categories/markets", {}, "200"),
        ("/categories/{slug}", "/categories/lending", {}, "200"),
        ("/tokens", "/tokens", {}, "200"),
        ("/tokens/{ticker}", "/tokens/btc", {}, "200"),
        ("/sentiment-pulse", "/sentiment-pulse", {}, "200"),
        ("/languages", "/languages", {}, "200"),
        ("/search", "/search", {"q": post.translations[0].title}, "200"),
        ("/search", "/search", {"q": "x"}, "422"),
        ("/posts", "/posts", {"sentiment": "SAD"}, "422"),
        ("/changes", "/changes", {}, "200"),
        ("/changes", "/changes", {"cursor": "c1~X"}, "422"),
        ("/changes", "/changes", {"cursor": "c1~0ther~0.1"}, "409"),
        (
            "/changes",
            "/changes",
            {"cursor": cursors.encode(await current_epoch(url, key), {}), "lang": "de-DE,ja-JP"},
            "200",
        ),
    ]
    async with aiohttp.ClientSession() as http:
        for template, path, params, status in calls:
            async with http.get(url + BASE + path, params=params, headers=auth(key)) as resp:
                assert str(resp.status) == status, (path, resp.status)
                body = orjson.loads(await resp.read())
                missing = {h.lower() for h in _declared_headers(doc, template, status)} - {
                    h.lower() for h in resp.headers
                }
                assert not missing, (path, status, missing)
            errors = sorted(_validator(doc, template, status).iter_errors(body), key=str)
            assert not errors, (path, [e.message for e in errors[:3]])
        async with http.get(url + BASE + "/posts") as resp:
            assert resp.status == 401
            errors = list(_validator(doc, "/posts", "401").iter_errors(await resp.json()))
            assert not errors


async def test_schemathesis_finds_no_failure(live, tmp_path):
    # Async, so the app (served on this test's event loop) answers while schemathesis runs.
    # One worker: with two, its threads build ASTs at once, and CPython 3.11 can then fail one
    # with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905,
    # fixed in later releases), seen here once in a loaded run: a crash of the tool, not a finding.
    # A 503 is not a server error to flag when it is the documented refusal of an
    # X-Min-Log-Position ahead of the data (schemas/openapi.json#/components/parameters/min_log_position):
    # schemathesis generates such marks, so its check lets 503 through and this test reads every
    # 503 of the run from its cassette and requires exactly that refusal.
    # A webhook URL the schema allows can still be refused by the address policy (a host that does
    # not resolve, a private address: docs/webhooks.md#endpoints), which no schema can say; so a
    # create or an update may answer a schema-valid body with 400, and this test requires each such
    # 400 to be the refusal of its url and nothing else.
    url, key, posts = live
    report = tmp_path / "schemathesis.txt"
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        '[checks.not_a_server_error]\nexpected-statuses = ["2xx", "3xx", "4xx", "503"]\n'
        # A body over its bound is refused as such (413), before any field is read.
        "[checks.negative_data_rejection]\n"
        'expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]\n'
        # Half the URLs schemathesis sends are loopback ones the app opens (nothing dispatches in
        # this test): creates then succeed, and the stateful phase follows their links.
        '[dictionaries.receivers]\nvalues = ["http://127.0.0.1:9/hook", "http://[::1]:9/tickerwire?x=1"]\n'
        '[parameters]\n"body.url" = { dictionary = "receivers", probability = 0.5 }\n'
        "[[operations]]\n"
        'include-operation-id = ["createWebhookEndpoint", "updateWebhookEndpoint"]\n'
        "checks.positive_data_acceptance.expected-statuses = "
        '["2xx", "3xx", "400", "401", "403", "404", "409", "429", "503"]\n'
    )
    cassette = tmp_path / "cassette.yaml"
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("st")),
        "--config-file",
        str(config),
        "run",
        f"{url}{BASE}/openapi.json",
        "--url",
        f"{url}{BASE}",
        "-H",
        f"Authorization: Bearer {key}",
        "--max-examples",
        "30",
        "--seed",
        "4",
        "--workers",
        "1",
        "--request-timeout",
        "10",
        "--suppress-health-check",
        "all",
        "--report",
        "vcr",
        "--report-vcr-path",
        str(cassette),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=600)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text = out.decode(errors="replace") + err.decode(errors="replace")
    report.write_text(text)
    assert proc.returncode == 0, text[-6000:]
    interactions = yaml.safe_load(cassette.read_text())["http_interactions"]
    answers = [
        (i["request"], int(i["response"]["status"]["code"]), i["response"]) for i in interactions if i.get("response")
    ]
    refused = [
        response
        for _, status, response in answers
        if status == 422 and "X-Min-Log-Position" in response["body"]["string"]
    ]
    assert refused, "schemathesis sent no malformed X-Min-Log-Position: its 422 is not exercised"
    unavailable = [(request, response) for request, status, response in answers if status == 503]
    assert unavailable, "schemathesis sent no X-Min-Log-Position ahead of the data: the header is not exercised"
    for request, response in unavailable:
        assert "X-Min-Log-Position" in request["headers"], request
        assert orjson.loads(response["body"]["string"])["error"]["message"] == FRESHNESS_REFUSAL, response
    _only_url_refusals(answers)


def _only_url_refusals(answers: list[tuple[dict, int, dict]]) -> None:
    doc = orjson.loads(DOC_PATH.read_bytes())
    bodies = {
        "POST": _body_validator(doc, "WebhookEndpointCreate"),
        "PATCH": _body_validator(doc, "WebhookEndpointUpdate"),
    }
    refusals = 0
    for request, status, response in answers:
        path = request["uri"].split("?", 1)[0]
        check = bodies.get(request["method"]) if "/webhooks/endpoints" in path else None
        if status != 400 or check is None or path.endswith(("/pause", "/resume", "/rotate-secret", "/replay", "/test")):
            continue
        try:
            sent = orjson.loads(request["body"]["string"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
        if request["headers"].get("Content-Type", [""])[0] != "application/json" or not check.is_valid(sent):
            continue
        error = orjson.loads(response["body"]["string"])["error"]
        if any(header in error["message"] for header in ("X-Min-Log-Position", "Idempotency-Key")):
            continue  # a header schemathesis broke on purpose, refused as such
        assert error.get("field") == "url" and error["message"].startswith("refused "), (request["body"], error)
        refusals += 1
    assert refusals, "no schema-valid create or update was refused for its url: the allowance is not exercised"


def _body_validator(doc: dict, name: str) -> jsonschema.Draft202012Validator:
    schema = {**doc["components"]["schemas"][name], "components": doc["components"]}
    return jsonschema.Draft202012Validator(schema)


class DocumentClient:
    """A partner's client built from the served OpenAPI document alone: plain aiohttp, the
    document's server URL, operation paths, parameter names and response fields."""

    def __init__(self, http: aiohttp.ClientSession, doc_url: str, key: str) -> None:
        self.http, self.doc_url, self.key = http, doc_url, key

    async def load(self) -> None:
        async with self.http.get(self.doc_url) as resp:
            self.doc = await resp.json()
        origin = self.doc_url.split("/", 3)
        self.base = f"{origin[0]}//{origin[2]}" + self.doc["servers"][0]["url"]
        self.ops = {op["operationId"]: (path, op) for path, item in self.doc["paths"].items() for op in item.values()}
        scheme = next(iter(self.doc["components"]["securitySchemes"].values()))
        assert scheme["type"] == "http" and scheme["scheme"] == "bearer"

    def _param_names(self, op_id: str) -> set[str]:
        refs = self.ops[op_id][1]["parameters"]
        params = self.doc["components"]["parameters"]
        return {params[r["$ref"].rsplit("/", 1)[1]]["name"] for r in refs}

    async def call(self, op_id: str, **params) -> dict:
        path, _ = self.ops[op_id]
        assert set(params) <= self._param_names(op_id)
        async with self.http.get(
            self.base + path,
            params={k: str(v) for k, v in params.items()},
            headers={"Authorization": f"Bearer {self.key}"},
        ) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()

    async def walk_older(self, limit: int) -> list[int]:
        ids, page = [], await self.call("listPosts", limit=limit)
        while True:
            ids += [p["id"] for p in page["posts"]]
            if page["next_cursor"] is None:
                return ids
            page = await self.call("listPosts", limit=limit, before=page["next_cursor"])

    async def walk_newer(self, start: int, limit: int) -> list[int]:
        """From a post id towards the newest, newest-first pages reversed into oldest-first order."""
        ids, cursor = [], start
        while True:
            page = await self.call("listPosts", limit=limit, after=cursor)
            ids += [p["id"] for p in reversed(page["posts"])]
            if page["prev_cursor"] is None:
                return ids
            cursor = page["prev_cursor"]

    async def gap_fill(self, last_id: int, limit: int = 20) -> list[int]:
        """docs/api.md#reconnect: after=<last_id> repeatedly until the page is empty."""
        ids, cursor = [], last_id
        while True:
            page = await self.call("listPosts", limit=limit, after=cursor)
            if not page["posts"]:
                return ids
            ids += [p["id"] for p in reversed(page["posts"])]
            cursor = page["posts"][0]["id"]


async def test_a_client_from_the_document_alone_pages_both_ways_and_gap_fills(live):
    url, key, posts = live
    expected = [p.id for p in visible_feed(posts)]
    async with aiohttp.ClientSession() as http:
        client = DocumentClient(http, f"{url}{BASE}/openapi.json", key)
        await client.load()
        assert await client.walk_older(limit=17) == expected
        assert await client.walk_newer(expected[-1], limit=13) == list(reversed(expected[:-1]))
        assert await client.gap_fill(expected[30]) == list(reversed(expected[:30]))
        assert await client.gap_fill(expected[0]) == []
