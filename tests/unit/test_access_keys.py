"""Pure parts of access control: key format and hashing, the Authorization header, the limit
headers and 429s, and the redaction of keys from log lines."""

from __future__ import annotations

import hashlib
import logging

import orjson

from tickerwire.services.api.limits import Usage, refusal
from tickerwire.services.common.http.keys import (
    KEY_PREFIX,
    bearer_key,
    display_prefix,
    generate_key,
    hash_key,
    hashes_match,
    looks_like_key,
)
from tickerwire.services.common.runtime.logs import JsonFormatter, redact


def test_keys_are_prefixed_random_and_stored_as_sha256():
    keys = {generate_key() for _ in range(100)}
    assert len(keys) == 100
    for key in keys:
        assert key.startswith(KEY_PREFIX) and looks_like_key(key) and len(key) >= len(KEY_PREFIX) + 43
        assert hash_key(key) == hashlib.sha256(key.encode()).hexdigest()
        assert key[len(KEY_PREFIX) + 4 :] not in display_prefix(key)
    key = generate_key()
    assert hashes_match(hash_key(key), hash_key(key)) and not hashes_match(hash_key(key), hash_key(generate_key()))


def test_bearer_header_parsing():
    key = generate_key()
    assert bearer_key(f"Bearer {key}") == key
    assert bearer_key(f"bearer  {key} ") == key
    for bad in (
        None,
        "",
        key,
        f"Basic {key}",
        "Bearer",
        "Bearer ",
        "Bearer tw_live_",
        "Bearer sk_live_abcdefghijkl",
        f"Bearer {key}\x00",
        "Bearer " + KEY_PREFIX + "é" * 20,
        "Bearer " + KEY_PREFIX + "a" * 200,
    ):
        assert bearer_key(bad) is None, bad


def usage(outcome="OK", **kw) -> Usage:
    base = dict(
        outcome=outcome,
        rate_limit=60,
        minute_used=10,
        minute_reset=1_700_000_040,
        quota=5000,
        day_used=100,
        day_reset=1_700_006_400,
        now=1_700_000_010.2,
    )
    base.update(kw)
    return Usage(**base)


def test_admitted_usage_headers():
    assert usage().headers() == {
        "X-RateLimit-Limit": "60",
        "X-RateLimit-Remaining": "50",
        "X-RateLimit-Reset": "1700000040",
        "X-Quota-Limit": "5000",
        "X-Quota-Remaining": "4900",
        "X-Quota-Reset": "1700006400",
        # draft-ietf-httpapi-ratelimit-headers-11: both policies, then what is left of each window.
        "RateLimit-Policy": '"minute";q=60;w=60, "day";q=5000;w=86400',
        "RateLimit": '"minute";r=50;t=30, "day";r=4900;t=6390',
    }
    assert usage(minute_used=70).headers()["X-RateLimit-Remaining"] == "0"  # limit lowered below usage
    assert usage(minute_used=70).headers()["RateLimit"].startswith('"minute";r=0;')


def test_rate_limited_refusal():
    err = refusal(usage("RATE_LIMITED", minute_used=60))
    resp = err.response()
    body = orjson.loads(resp.body)["error"]
    assert resp.status == 429 and body["code"] == "RATE_LIMITED"
    assert body["retry_after_sec"] == 30 and resp.headers["Retry-After"] == "30"  # ceil(29.8)
    assert resp.headers["X-RateLimit-Remaining"] == "0" and resp.headers["X-RateLimit-Reset"] == "1700000040"
    assert resp.headers["RateLimit"] == '"minute";r=0;t=30, "day";r=4900;t=6390'


def test_quota_refusal_waits_for_utc_midnight_and_never_less_than_a_second():
    err = refusal(usage("QUOTA_EXHAUSTED", day_used=5000))
    assert err.retry_after_sec == 6390 and err.headers["X-Quota-Remaining"] == "0"
    assert err.headers["X-Quota-Reset"] == "1700006400" and err.code == "QUOTA_EXHAUSTED"
    assert err.headers["RateLimit"].endswith('"day";r=0;t=6390')
    late = refusal(usage("QUOTA_EXHAUSTED", day_used=5000, now=1_700_006_399.99))
    assert late.retry_after_sec == 1


def test_redaction_of_keys_anywhere_in_a_log_line():
    key = generate_key()
    assert key not in redact(f"GET /stream?key={key}&x=1")
    record = logging.LogRecord("t", logging.WARNING, __file__, 1, "got %s", (key,), None)
    record.fields = {"nested": {"url": f"/x?key={key}"}, "list": [key]}
    try:
        raise ValueError(f"bad {key}")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    line = JsonFormatter("test").format(record)
    assert key not in line and key[len(KEY_PREFIX) :] not in line
    assert orjson.loads(line)["msg"] == "got tw_live_***"
