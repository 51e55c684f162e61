"""Typed models of the webhook endpoint operations (``/webhooks/endpoints``), forward compatible
as every model of :mod:`tickerwire_client.models`: unknown fields land in ``extra``, values
outside a known enum are kept as plain strings.

The shapes are the OpenAPI document's ``WebhookEndpoint``, ``WebhookEndpointList``,
``WebhookAttempt`` and ``WebhookAttemptList``, and the answers of the write operations:
``WebhookEndpointSecret`` (create, rotate-secret: the secret, shown once) and
``WebhookTestQueued`` (a test event). A field an older server does not send takes the value the
contract gives for "none" (``description`` ``""``, ``type`` ``post.created``,
``response_excerpt`` None).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from .meta import ResponseMeta
from .models import OpenEnum, _extra, _extra_field, _meta_field, parse_timestamp


class WebhookStatus(OpenEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    DISABLED = "disabled"


class AttemptOutcome(OpenEnum):
    DELIVERED = "delivered"
    FAILED = "failed"
    GONE = "gone"
    REFUSED = "refused"


class AttemptType(OpenEnum):
    POST_CREATED = "post.created"
    WEBHOOK_TEST = "webhook.test"


def _time(value: str | None) -> datetime | None:
    return parse_timestamp(value) if value is not None else None


def _strings(value: Any) -> list[str] | None:
    return None if value is None else [str(x) for x in value]


@dataclass(frozen=True, slots=True)
class WebhookFilters:
    """The stream's filters of an endpoint: OR within one, AND between them; None: no restriction."""

    locales: list[str] | None
    tickers: list[str] | None
    categories: list[str] | None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WebhookFilters:
        return cls(
            locales=_strings(d.get("locales")),
            tickers=_strings(d.get("tickers")),
            categories=_strings(d.get("categories")),
        )


_ENDPOINT = frozenset(
    {
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
    }
)


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """One of the workspace's endpoints (schemas/openapi.json#/components/schemas/WebhookEndpoint)
    and the dispatcher's progress on it; never its secret. ``cursor`` is the resume cursor after
    the last message it acknowledged (``changes`` and the stream take it too)."""

    id: str
    url: str
    description: str
    filters: WebhookFilters
    status: WebhookStatus | str
    disabled_reason: str | None
    disabled_at: datetime | None
    failing_since: datetime | None
    next_attempt_at: datetime | None
    attempt: int
    delivered: int
    last_delivered_at: datetime | None
    cursor: str | None
    created_at: datetime
    secret_generation: int
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> WebhookEndpoint:
        return cls(
            id=d["id"],
            url=d["url"],
            description=d.get("description") or "",
            filters=WebhookFilters.from_dict(d["filters"]),
            status=WebhookStatus.parse(d["status"]),
            disabled_reason=d.get("disabled_reason"),
            disabled_at=_time(d.get("disabled_at")),
            failing_since=_time(d.get("failing_since")),
            next_attempt_at=_time(d.get("next_attempt_at")),
            attempt=int(d["attempt"]),
            delivered=int(d["delivered"]),
            last_delivered_at=_time(d.get("last_delivered_at")),
            cursor=d.get("cursor"),
            created_at=parse_timestamp(d["created_at"]),
            secret_generation=int(d["secret_generation"]),
            extra=_extra(d, _ENDPOINT),
            meta=meta,
        )


@dataclass(frozen=True, slots=True)
class WebhookEndpointList:
    """The workspace's endpoints that are not removed, oldest first (at most 100)."""

    endpoints: list[WebhookEndpoint]
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> WebhookEndpointList:
        return cls(
            endpoints=[WebhookEndpoint.from_dict(x) for x in d.get("endpoints") or ()],
            extra=_extra(d, frozenset({"endpoints"})),
            meta=meta,
        )


@dataclass(frozen=True, slots=True)
class WebhookEndpointSecret:
    """The answer of create and rotate-secret: the endpoint and its signing secret (``whsec_...``).

    The secret is shown this once: store it (``Webhook(secret)`` verifies with it). It is left
    out of ``repr`` so that logging the result does not log the secret.
    """

    endpoint: WebhookEndpoint
    secret: str = field(repr=False)
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> WebhookEndpointSecret:
        secret = d["secret"]
        if not isinstance(secret, str):
            raise TypeError("secret is not a string")
        return cls(
            endpoint=WebhookEndpoint.from_dict(d["endpoint"]),
            secret=secret,
            extra=_extra(d, frozenset({"endpoint", "secret"})),
            meta=meta,
        )

    @property
    def location(self) -> str | None:
        """The ``Location`` header of a create's 201: the new endpoint's URL."""
        return self.meta.headers.get("Location") if self.meta is not None else None


_ATTEMPT = frozenset(
    {
        "webhook_id",
        "type",
        "attempt",
        "attempted_at",
        "outcome",
        "status",
        "latency_ms",
        "error",
        "response_excerpt",
        "next_attempt_at",
    }
)


@dataclass(frozen=True, slots=True)
class WebhookAttempt:
    """One delivery attempt of one message (schemas/openapi.json#/components/schemas/WebhookAttempt).

    ``response_excerpt``: at most the first 1024 bytes of the receiver's answer, decoded as UTF-8
    with replacement; None when no response came.
    """

    webhook_id: str
    type: AttemptType | str
    attempt: int
    attempted_at: datetime
    outcome: AttemptOutcome | str
    status: int | None
    latency_ms: float | None
    error: str | None
    response_excerpt: str | None
    next_attempt_at: datetime | None
    extra: dict[str, Any] = _extra_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WebhookAttempt:
        status, latency = d.get("status"), d.get("latency_ms")
        return cls(
            webhook_id=d["webhook_id"],
            type=AttemptType.parse(d.get("type") or AttemptType.POST_CREATED),
            attempt=int(d["attempt"]),
            attempted_at=parse_timestamp(d["attempted_at"]),
            outcome=AttemptOutcome.parse(d["outcome"]),
            status=int(status) if status is not None else None,
            latency_ms=float(latency) if latency is not None else None,
            error=d.get("error"),
            response_excerpt=d.get("response_excerpt"),
            next_attempt_at=_time(d.get("next_attempt_at")),
            extra=_extra(d, _ATTEMPT),
        )


@dataclass(frozen=True, slots=True)
class WebhookAttemptList:
    """An endpoint's latest attempts, newest first."""

    attempts: list[WebhookAttempt]
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> WebhookAttemptList:
        return cls(
            attempts=[WebhookAttempt.from_dict(x) for x in d.get("attempts") or ()],
            extra=_extra(d, frozenset({"attempts"})),
            meta=meta,
        )


@dataclass(frozen=True, slots=True)
class WebhookTestQueued:
    """The answer of a test event (202): the ``webhook-id`` (``msg_test_...``) the test message
    carries, to find it among the endpoint's attempts."""

    webhook_id: str
    extra: dict[str, Any] = _extra_field()
    meta: ResponseMeta | None = _meta_field()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], meta: ResponseMeta | None = None) -> WebhookTestQueued:
        return cls(webhook_id=d["webhook_id"], extra=_extra(d, frozenset({"webhook_id"})), meta=meta)
