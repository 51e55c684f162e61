"""Verifying the webhooks Tickerwire sends (docs/webhooks.md#verifying), the Standard Webhooks way.

Each request carries ``webhook-id``, ``webhook-timestamp`` (unix seconds) and
``webhook-signature``: ``v1,<base64 HMAC-SHA256(secret, "{id}.{timestamp}.{body}")>``, once per
secret that signs (two, space-separated, while a secret is rotated). ``Webhook(secret).verify(body,
headers)`` checks the signature over the *exact bytes received* and the timestamp's tolerance,
and returns the message as a ``WebhookMessage``; every refusal is a ``WebhookVerificationError``
whose ``reason`` a program can branch on (``REASONS``).

A body that was parsed and serialized again (by a framework, a middleware, ``json.dumps``) is not
the body that was signed: ``verify`` takes only ``bytes`` and says so when given a ``str`` or a
parsed object, and when a signature fails on a JSON body that is not in the compact form the
server sends, it says that the body looks re-serialized (reason ``body_reserialized``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, Iterable, Literal, Protocol, get_args

from .errors import TickerwireError
from .models import PostLean

#: The prefix of a secret as Tickerwire shows it (``whsec_`` and the base64 of its bytes).
SECRET_PREFIX: Final = "whsec_"
#: How far ``webhook-timestamp`` may lie from the receiver's clock, either way (Standard Webhooks' default: 5 minutes).
DEFAULT_TOLERANCE: Final = 300.0

Reason = Literal[
    "body_not_bytes",
    "missing_header",
    "invalid_header",
    "timestamp_too_old",
    "timestamp_too_new",
    "bad_signature",
    "body_reserialized",
    "invalid_payload",
]
#: Every ``WebhookVerificationError.reason``, the same strings as the TypeScript client's.
REASONS: Final[tuple[Reason, ...]] = get_args(Reason)

_RAW_BYTES_HINT = (
    "pass the request body exactly as received, as bytes, before any parsing "
    "(aiohttp: await request.read(); Starlette/FastAPI: await request.body(); Flask: request.get_data(); "
    "Django: request.body)"
)
_TIMESTAMP = re.compile(r"[0-9]{1,15}")


class WebhookSecretError(TickerwireError, ValueError):
    """The secret given to ``Webhook`` is not a ``whsec_`` secret, base64, or is empty."""


class WebhookVerificationError(TickerwireError):
    """A request that must not be acted on; ``reason`` says why (one of ``REASONS``)."""

    reason: Reason

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class WebhookBodyNotBytes(WebhookVerificationError):
    """The body given was a ``str`` or an already parsed object, not the raw bytes (``body_not_bytes``)."""


class WebhookHeaderError(WebhookVerificationError):
    """``header`` is absent (``missing_header``) or not what the spec allows (``invalid_header``)."""

    def __init__(self, reason: Literal["missing_header", "invalid_header"], header: str, message: str) -> None:
        super().__init__(reason, message)
        self.header = header


class WebhookTimestampError(WebhookVerificationError):
    """``webhook-timestamp`` lies more than ``tolerance`` seconds before (``timestamp_too_old``) or
    after (``timestamp_too_new``) ``now``: a replayed request, or a clock that is off."""

    def __init__(
        self,
        reason: Literal["timestamp_too_old", "timestamp_too_new"],
        timestamp: int,
        now: int,
        tolerance: float,
    ) -> None:
        side = "before" if reason == "timestamp_too_old" else "after"
        super().__init__(
            reason,
            f"webhook-timestamp {timestamp} is {abs(now - timestamp)} s {side} this machine's clock ({now}), "
            f"beyond the tolerance of {tolerance:g} s: a replayed request, or a clock that is off",
        )
        self.timestamp = timestamp
        self.now = now
        self.tolerance = tolerance


class WebhookSignatureError(WebhookVerificationError):
    """No ``v1`` signature of ``webhook-signature`` matches the body with this secret
    (``bad_signature``), or none does and the body looks parsed and re-serialized
    (``body_reserialized``)."""


class WebhookPayloadError(WebhookVerificationError):
    """The signature is good but the body is not UTF-8 JSON (``invalid_payload``)."""


@dataclass(frozen=True, slots=True)
class WebhookMessage:
    """One verified request. ``id`` is the same on every redelivery of a message: act on each once."""

    #: ``webhook-id``.
    id: str
    #: ``webhook-timestamp``: unix seconds of this attempt.
    timestamp: int
    #: The body, exactly the bytes verified.
    body: bytes
    #: The body's JSON (``None`` for an empty body).
    payload: Any
    #: The message's ``type`` (``"post.created"``), ``ts``, ``log_position``, ``cursor`` (the resume
    #: cursor just after it) and ``data``, each ``None`` where the payload has none.
    type: str | None
    ts: str | None
    log_position: str | None
    cursor: str | None
    data: dict[str, Any] | None

    @property
    def sent_at(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp, tz=timezone.utc)

    @property
    def post(self) -> PostLean | None:
        """The post of a ``post.created`` message (its ``data``, the lean shape); ``None`` for another type."""
        if self.type != "post.created" or self.data is None:
            return None
        return PostLean.from_dict(self.data)


class HeaderSource(Protocol):
    """What ``verify`` reads headers from: a ``Mapping`` (aiohttp's and Starlette's headers, a
    ``dict``, WSGI's ``EnvironHeaders``) or ``http.server``'s ``HTTPMessage``; names in any case."""

    def items(self) -> Iterable[tuple[str, Any]]: ...


class Webhook:
    """Verifies requests signed with one endpoint's secret.

    ``secret``: as shown at registration (``whsec_<base64>``), the base64 alone, or the key's raw
    ``bytes``. ``tolerance``: seconds ``webhook-timestamp`` may differ from the clock either way.
    """

    def __init__(self, secret: str | bytes, *, tolerance: float = DEFAULT_TOLERANCE) -> None:
        self._key = _secret_bytes(secret)
        if tolerance < 0:
            raise ValueError("the tolerance is a number of seconds, 0 or more")
        self.tolerance = tolerance

    def sign(self, webhook_id: str, timestamp: int, body: bytes) -> str:
        """The ``v1,<base64>`` signature of ``body`` (for a receiver's own tests)."""
        return "v1," + base64.b64encode(self._digest(webhook_id, timestamp, body)).decode()

    def verify(
        self, body: bytes | bytearray | memoryview, headers: HeaderSource, *, now: float | None = None
    ) -> WebhookMessage:
        """The verified message; ``WebhookVerificationError`` (a subclass, with ``reason``) when the
        request must not be acted on. ``body``: the raw bytes as received; ``now``: unix seconds to
        check the timestamp against (default: this machine's clock)."""
        raw = _raw_body(body)
        values = _header_values(headers)
        webhook_id = _one_header(values, "webhook-id")
        timestamp_text = _one_header(values, "webhook-timestamp")
        signatures = " ".join(_required(values, "webhook-signature"))
        if not _TIMESTAMP.fullmatch(timestamp_text):
            raise WebhookHeaderError(
                "invalid_header",
                "webhook-timestamp",
                f"webhook-timestamp must be whole unix seconds, got {timestamp_text[:40]!r}",
            )
        timestamp = int(timestamp_text)
        self._check_time(timestamp, int(time.time() if now is None else now))
        expected = self._digest(webhook_id, timestamp, raw)
        if not any(hmac.compare_digest(expected, candidate) for candidate in _v1_signatures(signatures)):
            raise _signature_error(raw)
        return _message(webhook_id, timestamp, raw)

    def _digest(self, webhook_id: str, timestamp: int, body: bytes) -> bytes:
        return hmac.new(self._key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()

    def _check_time(self, timestamp: int, now: int) -> None:
        if now - timestamp > self.tolerance:
            raise WebhookTimestampError("timestamp_too_old", timestamp, now, self.tolerance)
        if timestamp - now > self.tolerance:
            raise WebhookTimestampError("timestamp_too_new", timestamp, now, self.tolerance)


def _secret_bytes(secret: str | bytes) -> bytes:
    if isinstance(secret, (bytes, bytearray)):
        key = bytes(secret)
    elif isinstance(secret, str):
        text = secret.strip().removeprefix(SECRET_PREFIX)
        try:
            key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError) as e:
            raise WebhookSecretError(
                "a webhook secret is whsec_ followed by base64, as shown when the endpoint was registered"
            ) from e
    else:
        raise WebhookSecretError(f"a webhook secret is a str (whsec_...) or bytes, not {type(secret).__name__}")
    if not key:
        raise WebhookSecretError("the webhook secret is empty")
    return key


def _raw_body(body: object) -> bytes:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        raise WebhookBodyNotBytes(
            "body_not_bytes",
            "the body is a str, not the raw bytes: a decoded or re-serialized body (json.dumps of a parsed one) "
            f"is not what was signed; {_RAW_BYTES_HINT}",
        )
    raise WebhookBodyNotBytes(
        "body_not_bytes",
        f"the body is a {type(body).__name__}: it looks already parsed, and a parsed body serialized again is not "
        f"the bytes that were signed; {_RAW_BYTES_HINT}",
    )


def _header_values(headers: HeaderSource) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for name, value in headers.items():
        for one in value if isinstance(value, (list, tuple)) else (value,):
            values.setdefault(str(name).lower(), []).append(str(one).strip())
    return values


def _required(values: dict[str, list[str]], name: str) -> list[str]:
    found = [v for v in values.get(name, ()) if v]
    if not found:
        raise WebhookHeaderError(
            "missing_header", name, f"the request has no {name} header: is it a Tickerwire webhook?"
        )
    return found


def _one_header(values: dict[str, list[str]], name: str) -> str:
    found = _required(values, name)
    if len(set(found)) > 1:
        raise WebhookHeaderError("invalid_header", name, f"the request has {len(found)} different {name} headers")
    return found[0]


def _v1_signatures(header: str) -> Iterable[bytes]:
    """The decoded ``v1`` signatures of ``webhook-signature`` (other versions and garbage skipped).
    A trailing comma is dropped: proxies may join repeated header lines with ", "."""
    for entry in header.split():
        version, _, encoded = entry.removesuffix(",").partition(",")
        if version != "v1":
            continue
        try:
            yield base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue


def looks_reserialized(body: bytes) -> bool:
    """Whether ``body`` is JSON but not in the compact form the server sends (no whitespace between
    tokens, non-ASCII as UTF-8): what a framework or ``json.dumps`` writes after parsing."""
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return json.dumps(parsed, separators=(",", ":"), ensure_ascii=False).encode() != body


def _signature_error(body: bytes) -> WebhookSignatureError:
    if looks_reserialized(body):
        return WebhookSignatureError(
            "body_reserialized",
            "no signature matches, and the body looks parsed and re-serialized: it is JSON but not in the compact "
            "form the server sends (whitespace between tokens, escaped non-ASCII, reordered or reformatted values); "
            f"the signature covers the exact bytes sent, so {_RAW_BYTES_HINT}. If these are the bytes received, "
            "check the secret",
        )
    return WebhookSignatureError(
        "bad_signature",
        "no signature matches: the body was changed, or the secret is not this endpoint's (after a rotation, "
        "the new one)",
    )


def _message(webhook_id: str, timestamp: int, body: bytes) -> WebhookMessage:
    try:
        payload = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError) as e:
        raise WebhookPayloadError(
            "invalid_payload", f"the signature is good but the body is not UTF-8 JSON: {e}"
        ) from e
    fields = payload if isinstance(payload, dict) else {}

    def text(name: str) -> str | None:
        value = fields.get(name)
        return value if isinstance(value, str) else None

    data = fields.get("data")
    return WebhookMessage(
        id=webhook_id,
        timestamp=timestamp,
        body=body,
        payload=payload,
        type=text("type"),
        ts=text("ts"),
        log_position=text("log_position"),
        cursor=text("cursor"),
        data=data if isinstance(data, dict) else None,
    )
