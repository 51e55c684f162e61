"""The webhook verifier (``tickerwire_client.webhooks``) against the shared cases of
clients/shared/vectors.json (the TypeScript client's test/webhooks.test.ts reads the same), the
spec's published test vector, the reference library (``standardwebhooks`` from PyPI) in both
directions, and the server's signer (services/common/http/signing.py)."""

from __future__ import annotations

import base64
import email
import json
import os
import re
import time
from datetime import datetime, timezone
from http.client import HTTPMessage
from pathlib import Path
from typing import Any

import pytest
import standardwebhooks.webhooks as reference
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict, CIMultiDictProxy

from tickerwire.services.common.http import signing
from tickerwire_client import (
    PostLean,
    Webhook,
    WebhookBodyNotBytes,
    WebhookHeaderError,
    WebhookMessage,
    WebhookSecretError,
    WebhookSignatureError,
    WebhookTimestampError,
    WebhookVerificationError,
)
from tickerwire_client.webhooks import REASONS

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "clients" / "shared" / "vectors.json").read_text())
WEBHOOKS = VECTORS["webhooks"]
SPEC = WEBHOOKS["spec"]
#: The body of a post.created message as the server writes it: compact JSON, UTF-8.
MESSAGE = next(c for c in WEBHOOKS["cases"] if c.get("expect", {}).get("type") == "post.created")["body"].encode()


def case_body(case: dict[str, Any]) -> Any:
    """The case's body as it is given: its UTF-8 bytes, else the string or the parsed object."""
    if case.get("pass_as") == "string":
        return case["body"]
    if case.get("pass_as") == "parsed":
        return json.loads(case["body"])
    return case["body"].encode()


def fields(message: WebhookMessage) -> dict[str, Any]:
    post = message.post
    return {
        "id": message.id,
        "timestamp": message.timestamp,
        "type": message.type,
        "ts": message.ts,
        "log_position": message.log_position,
        "cursor": message.cursor,
        "post_title": post.title if post else None,
    }


def reference_at(monkeypatch: pytest.MonkeyPatch, now: float) -> None:
    """The reference library's clock set to ``now`` (it reads ``datetime.now``)."""

    class At(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.fromtimestamp(now, tz)

    monkeypatch.setattr(reference, "datetime", At)


def fresh_secret() -> bytes:
    return os.urandom(32)


# ---------------------------------------------------------------------------- the shared cases


@pytest.mark.parametrize("case", WEBHOOKS["cases"], ids=lambda c: c["name"])
def test_each_shared_case(case):
    webhook = Webhook(case["secret"], tolerance=WEBHOOKS["tolerance"])
    if "expect" in case:
        message = webhook.verify(case_body(case), case["headers"], now=case["now"])
        got = fields(message)
        assert {k: got[k] for k in case["expect"]} == case["expect"]
        assert message.body == case["body"].encode()
        assert message.payload == json.loads(case["body"])
    else:
        with pytest.raises(WebhookVerificationError) as raised:
            webhook.verify(case_body(case), case["headers"], now=case["now"])
        assert raised.value.reason == case["reason"], str(raised.value)
        if "header" in case:
            assert isinstance(raised.value, WebhookHeaderError) and raised.value.header == case["header"]


def test_the_shared_cases_cover_every_reason():
    assert {c["reason"] for c in WEBHOOKS["cases"] if "reason" in c} == set(REASONS)


# What the reference does not refuse that this verifier does: a fractional timestamp (it reads
# one as a float; the spec's is whole seconds) and a body given as a string (it takes one).
# It parses no JSON here (json_parse=False), so a good signature over a non-JSON body passes.
REFERENCE_ACCEPTS = {"invalid_header", "body_not_bytes", "invalid_payload"}


@pytest.mark.parametrize("case", [c for c in WEBHOOKS["cases"] if "pass_as" not in c], ids=lambda c: c["name"])
def test_the_reference_library_agrees_with_each_shared_case(case, monkeypatch):
    reference_at(monkeypatch, case["now"])
    webhook = reference.Webhook(case["secret"])
    if "expect" in case or case["reason"] in REFERENCE_ACCEPTS:
        webhook.verify(case["body"].encode(), case["headers"], json_parse=False)
    else:
        with pytest.raises(reference.WebhookVerificationError):
            webhook.verify(case["body"].encode(), case["headers"], json_parse=False)


def test_the_spec_vector_is_what_each_signer_writes():
    at = datetime.fromtimestamp(SPEC["timestamp"], tz=timezone.utc)
    key = base64.b64decode(SPEC["secret"].removeprefix("whsec_"))
    assert Webhook(SPEC["secret"]).sign(SPEC["id"], SPEC["timestamp"], SPEC["body"].encode()) == SPEC["signature"]
    assert signing.signature(key, SPEC["id"], SPEC["timestamp"], SPEC["body"].encode()) == SPEC["signature"]
    assert reference.Webhook(SPEC["secret"]).sign(SPEC["id"], at, SPEC["body"]) == SPEC["signature"]


# ---------------------------------------------------------------------------- both directions, now


def test_what_the_reference_signs_is_accepted():
    secret = signing.secret_text(fresh_secret())
    now = int(time.time())
    signature = reference.Webhook(secret).sign(
        "msg_ref_1", datetime.fromtimestamp(now, tz=timezone.utc), MESSAGE.decode()
    )
    headers = {"webhook-id": "msg_ref_1", "webhook-timestamp": str(now), "webhook-signature": signature}
    message = Webhook(secret).verify(MESSAGE, headers)
    assert (message.id, message.timestamp, message.payload) == ("msg_ref_1", now, json.loads(MESSAGE))
    assert isinstance(message.post, PostLean) and message.post.title == json.loads(MESSAGE)["data"]["title"]


def test_what_the_server_signs_the_reference_verifies():
    secret = fresh_secret()
    headers = signing.headers("msg_srv_1", int(time.time()), MESSAGE, [secret])
    assert reference.Webhook(signing.secret_text(secret)).verify(MESSAGE, headers) == json.loads(MESSAGE)
    assert Webhook(signing.secret_text(secret)).verify(MESSAGE, headers).payload == json.loads(MESSAGE)


def test_during_a_rotation_either_secret_verifies():
    old, new = fresh_secret(), fresh_secret()
    headers = signing.headers("msg_rot_1", int(time.time()), MESSAGE, [old, new])
    assert len(headers["webhook-signature"].split()) == 2
    for secret in (old, new):  # the new one matches the second signature
        assert Webhook(signing.secret_text(secret)).verify(MESSAGE, headers).id == "msg_rot_1"
        reference.Webhook(signing.secret_text(secret)).verify(MESSAGE, headers)
    with pytest.raises(WebhookSignatureError):
        Webhook(fresh_secret()).verify(MESSAGE, headers)


def server_signed(secret: bytes, body: bytes = MESSAGE, age: int = 0) -> dict[str, str]:
    return signing.headers("msg_srv_2", int(time.time()) - age, body, [secret])


@pytest.mark.parametrize(
    "change, reason",
    [
        ("a changed byte", "bad_signature"),
        ("an old timestamp", "timestamp_too_old"),
        ("a future timestamp", "timestamp_too_new"),
        ("a re-serialized body", "body_reserialized"),
    ],
)
def test_what_both_verifiers_refuse(change, reason):
    secret = fresh_secret()
    body, headers = MESSAGE, server_signed(secret)
    if change == "a changed byte":
        body = MESSAGE.replace(b'"importance":70', b'"importance":71')
    elif change == "an old timestamp":
        headers = server_signed(secret, age=301)
    elif change == "a future timestamp":
        headers = server_signed(secret, age=-301)
    else:
        body = json.dumps(json.loads(MESSAGE)).encode()
    assert body != MESSAGE or change.endswith("timestamp")
    with pytest.raises(WebhookVerificationError) as raised:
        Webhook(signing.secret_text(secret)).verify(body, headers)
    assert raised.value.reason == reason, str(raised.value)
    with pytest.raises(reference.WebhookVerificationError):
        reference.Webhook(signing.secret_text(secret)).verify(body, headers)


# ---------------------------------------------------------------------------- what the errors say


def test_a_reserialized_body_is_named_as_such():
    secret = fresh_secret()
    headers = server_signed(secret)
    with pytest.raises(WebhookSignatureError) as raised:
        Webhook(secret).verify(json.dumps(json.loads(MESSAGE), indent=1).encode(), headers)
    assert raised.value.reason == "body_reserialized"
    assert "re-serialized" in str(raised.value) and "exactly as received" in str(raised.value)
    with pytest.raises(WebhookSignatureError) as raised:  # compact, one value changed: not a re-serialization
        Webhook(secret).verify(MESSAGE.replace(b"BULLISH", b"BEARISH"), headers)
    assert raised.value.reason == "bad_signature" and "re-serialized" not in str(raised.value)


@pytest.mark.parametrize("body, says", [("text", "is a str"), ({"type": "post.created"}, "looks already parsed")])
def test_a_body_that_is_not_bytes_is_refused_before_anything_else(body, says):
    with pytest.raises(WebhookBodyNotBytes) as raised:
        Webhook(fresh_secret()).verify(body, {})
    assert raised.value.reason == "body_not_bytes"
    assert says in str(raised.value) and "as bytes, before any parsing" in str(raised.value)


def test_timestamp_errors_carry_the_clocks():
    secret = fresh_secret()
    with pytest.raises(WebhookTimestampError) as raised:
        Webhook(secret, tolerance=10).verify(MESSAGE, server_signed(secret, age=11))
    error = raised.value
    assert (error.reason, error.now - error.timestamp, error.tolerance) == ("timestamp_too_old", 11, 10)
    assert Webhook(secret, tolerance=10).verify(MESSAGE, server_signed(secret, age=9)).id == "msg_srv_2"


# ---------------------------------------------------------------------------- secrets and headers


def test_a_secret_in_each_form():
    key = fresh_secret()
    headers = server_signed(key)
    text = base64.b64encode(key).decode()
    for secret in (signing.secret_text(key), text, text.rstrip("="), key):
        assert Webhook(secret).verify(MESSAGE, headers).id == "msg_srv_2", secret
    for bad in ("whsec_not*base64", "", "whsec_"):
        with pytest.raises(WebhookSecretError):
            Webhook(bad)


def test_headers_from_aiohttp_and_http_server():
    old, new = fresh_secret(), fresh_secret()
    signed = signing.headers("msg_hdr_1", int(time.time()), MESSAGE, [old, new])
    # aiohttp: a case-insensitive multidict; the two signatures as two header lines.
    multi = CIMultiDict({"Webhook-Id": signed["webhook-id"], "Webhook-Timestamp": signed["webhook-timestamp"]})
    for one in signed["webhook-signature"].split():
        multi.add("Webhook-Signature", one)
    assert Webhook(new).verify(MESSAGE, CIMultiDictProxy(multi)).id == "msg_hdr_1"
    # http.server: the request's HTTPMessage.
    raw = "".join(f"{name.title()}: {value}\r\n" for name, value in signed.items()) + "\r\n"
    parsed = email.message_from_string(raw, _class=HTTPMessage)
    assert Webhook(old).verify(MESSAGE, parsed).id == "msg_hdr_1"
    conflicting = CIMultiDict(multi)
    conflicting.add("webhook-id", "msg_other")
    with pytest.raises(WebhookHeaderError) as raised:
        Webhook(new).verify(MESSAGE, conflicting)
    assert (raised.value.reason, raised.value.header) == ("invalid_header", "webhook-id")


# ---------------------------------------------------------------------------- the README's receiver


async def test_the_readmes_receiver_acts_on_a_signed_post_and_refuses_a_changed_one(monkeypatch, capsys):
    readme = (ROOT / "clients" / "python" / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme[readme.index("\n## Receiving webhooks\n") :], re.S).group(1)
    run_app = "web.run_app(app, port=8080)\n"
    assert code.endswith(run_app), "the receiver ends by serving its app"
    secret = fresh_secret()
    monkeypatch.setenv("TICKERWIRE_WEBHOOK_SECRET", signing.secret_text(secret))
    namespace: dict[str, Any] = {}
    exec(code.removesuffix(run_app), namespace)  # the README's code, served by a test server instead
    async with TestClient(TestServer(namespace["app"])) as client:
        good = await client.post("/tickerwire", data=MESSAGE, headers=server_signed(secret))
        changed = await client.post("/tickerwire", data=MESSAGE.replace(b"70", b"71"), headers=server_signed(secret))
        answers = (good.status, changed.status, await changed.text())
    assert answers == (204, 400, "bad_signature")
    assert (
        capsys.readouterr().out == f"msg_srv_2 {json.loads(MESSAGE)['cursor']} {json.loads(MESSAGE)['data']['title']}\n"
    )
