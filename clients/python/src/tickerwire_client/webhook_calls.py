"""The webhook endpoint operations of :class:`~tickerwire_client.AsyncClient` (``/webhooks/endpoints``).

A workspace reads and manages its own endpoints with its key: list, get and attempts (reads),
create, update, delete, pause, resume, rotate-secret, replay and a test event (writes, JSON
bodies). Writes are retried only where sending twice does what sending once does (see
:meth:`WebhookCalls.create_webhook_endpoint` for the create's ``Idempotency-Key``); rotate-secret,
replay and a test event are retried only after a 429, which the server answers before acting.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence, TypedDict, TypeVar, Unpack, overload
from urllib.parse import quote

from .meta import ResponseMeta
from .webhook_models import (
    WebhookAttemptList,
    WebhookEndpoint,
    WebhookEndpointList,
    WebhookEndpointSecret,
    WebhookTestQueued,
)

T = TypeVar("T")

ENDPOINTS = "/webhooks/endpoints"
#: The longest ``Idempotency-Key`` the server takes.
MAX_IDEMPOTENCY_KEY = 255


class WebhookEndpointChanges(TypedDict, total=False):
    """What ``update_webhook_endpoint`` changes: only the keys given are sent. A filter given as
    None is sent as null: no restriction."""

    url: str
    description: str
    locales: Sequence[str] | None
    tickers: Sequence[str] | None
    categories: Sequence[str] | None


def check_idempotency_key(key: str) -> str:
    """``key`` if the server would take it as an ``Idempotency-Key`` (1 to 255 printable ASCII
    characters), else ``ValueError`` before anything is sent."""
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY or not all(" " <= c <= "~" for c in key) or key != key.strip():
        raise ValueError("an Idempotency-Key is 1 to 255 printable ASCII characters, without outer spaces")
    return key


def endpoint_path(endpoint_id: str, action: str = "") -> str:
    return f"{ENDPOINTS}/{quote(endpoint_id, safe='')}" + (f"/{action}" if action else "")


def filter_value(value: Sequence[str] | None) -> list[str] | None:
    if isinstance(value, str):
        raise TypeError("a filter is a sequence of strings, not one string")
    return None if value is None else [str(v) for v in value]


def create_body(
    url: str,
    description: str | None,
    locales: Sequence[str] | None,
    tickers: Sequence[str] | None,
    categories: Sequence[str] | None,
) -> dict[str, Any]:
    """The WebhookEndpointCreate body: ``url`` and the fields given (None left out)."""
    body: dict[str, Any] = {"url": url}
    if description is not None:
        body["description"] = description
    for name, value in (("locales", locales), ("tickers", tickers), ("categories", categories)):
        if value is not None:
            body[name] = filter_value(value)
    return body


def update_body(changes: WebhookEndpointChanges) -> dict[str, Any]:
    """The WebhookEndpointUpdate body: every key given, a filter's None as null."""
    if not changes:
        raise ValueError("nothing to change: give url, description, locales, tickers or categories")
    body: dict[str, Any] = dict(changes)
    for name in ("locales", "tickers", "categories"):
        if name in body:
            body[name] = filter_value(body[name])
    return body


def replay_body(since: datetime | str | None, cursor: str | None) -> dict[str, str]:
    """Exactly one of ``since`` (an RFC 3339 time; a ``datetime`` must carry its offset) or ``cursor``."""
    if (since is None) == (cursor is None):
        raise ValueError("replay needs exactly one of since= or cursor=")
    if cursor is not None:
        return {"cursor": cursor}
    if isinstance(since, datetime):
        if since.tzinfo is None or since.utcoffset() is None:
            raise ValueError("since= needs a timezone-aware datetime (RFC 3339 has an offset)")
        return {"since": since.isoformat()}
    assert since is not None
    return {"since": since}


class WebhookCalls:
    """The ``/webhooks/endpoints`` operations; :class:`~tickerwire_client.AsyncClient` provides ``_call``."""

    async def _call(
        self,
        method: str,
        path: str,
        parse: Callable[[Any, ResponseMeta], T],
        params: Mapping[str, str] | None = None,
        *,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = True,
    ) -> T:
        raise NotImplementedError

    async def webhook_endpoints(self) -> WebhookEndpointList:
        """GET /webhooks/endpoints: the workspace's endpoints that are not removed, oldest first."""
        return await self._call("GET", ENDPOINTS, WebhookEndpointList.from_dict)

    async def webhook_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        """GET /webhooks/endpoints/{id}; ``NotFound`` for an unknown, removed or foreign id."""
        return await self._call("GET", endpoint_path(endpoint_id), WebhookEndpoint.from_dict)

    async def webhook_attempts(self, endpoint_id: str, *, limit: int | None = None) -> WebhookAttemptList:
        """GET /webhooks/endpoints/{id}/attempts: the latest attempts, newest first (``limit`` 1 to 100)."""
        params = {"limit": str(limit)} if limit is not None else None
        return await self._call("GET", endpoint_path(endpoint_id, "attempts"), WebhookAttemptList.from_dict, params)

    async def create_webhook_endpoint(
        self,
        url: str,
        *,
        description: str | None = None,
        locales: Sequence[str] | None = None,
        tickers: Sequence[str] | None = None,
        categories: Sequence[str] | None = None,
        idempotency_key: str | None = None,
    ) -> WebhookEndpointSecret:
        """POST /webhooks/endpoints: a new endpoint and its secret, shown this once.

        Every create carries an ``Idempotency-Key``: ``idempotency_key`` (1 to 255 printable
        ASCII), or one the client makes for this call. So a create whose answer was lost is
        retried safely: the server answers the same 201 with the same endpoint and secret. Pass
        your own key (saved before the call) to get that across a restart of your process too.
        ``IdempotencyKeyReused``: the key came with another body within 24 hours;
        ``EndpointLimitReached``: the workspace has 100 endpoints.
        """
        key = check_idempotency_key(idempotency_key) if idempotency_key is not None else f"tw-{uuid.uuid4().hex}"
        body = create_body(url, description, locales, tickers, categories)
        return await self._call(
            "POST", ENDPOINTS, WebhookEndpointSecret.from_dict, body=body, headers={"Idempotency-Key": key}
        )

    async def update_webhook_endpoint(
        self, endpoint_id: str, **changes: Unpack[WebhookEndpointChanges]
    ) -> WebhookEndpoint:
        """PATCH /webhooks/endpoints/{id}: only the fields given change (``locales=None``: no restriction)."""
        return await self._call(
            "PATCH", endpoint_path(endpoint_id), WebhookEndpoint.from_dict, body=update_body(changes)
        )

    async def delete_webhook_endpoint(self, endpoint_id: str) -> ResponseMeta:
        """DELETE /webhooks/endpoints/{id}: the 204's meta. Retried after a lost answer like a
        read, so a ``NotFound`` after a retry can mean the first attempt removed it."""
        return await self._call("DELETE", endpoint_path(endpoint_id), _no_body)

    async def pause_webhook_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        """POST /webhooks/endpoints/{id}/pause: deliveries stop; the position is kept."""
        return await self._call("POST", endpoint_path(endpoint_id, "pause"), WebhookEndpoint.from_dict)

    async def resume_webhook_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        """POST /webhooks/endpoints/{id}/resume: a paused or disabled endpoint delivers again from its cursor."""
        return await self._call("POST", endpoint_path(endpoint_id, "resume"), WebhookEndpoint.from_dict)

    async def rotate_webhook_secret(self, endpoint_id: str) -> WebhookEndpointSecret:
        """POST /webhooks/endpoints/{id}/rotate-secret: the new secret, shown this once (both sign
        for 24 hours). Not retried after a lost answer: a second rotation would replace it."""
        return await self._call(
            "POST", endpoint_path(endpoint_id, "rotate-secret"), WebhookEndpointSecret.from_dict, idempotent=False
        )

    @overload
    async def replay_webhook_endpoint(self, endpoint_id: str, *, since: datetime | str) -> WebhookEndpoint: ...

    @overload
    async def replay_webhook_endpoint(self, endpoint_id: str, *, cursor: str) -> WebhookEndpoint: ...

    async def replay_webhook_endpoint(
        self, endpoint_id: str, *, since: datetime | str | None = None, cursor: str | None = None
    ) -> WebhookEndpoint:
        """POST /webhooks/endpoints/{id}/replay (202): deliver again everything after ``since`` (a
        time) or ``cursor`` (a resume cursor), exactly one of them."""
        return await self._call(
            "POST",
            endpoint_path(endpoint_id, "replay"),
            WebhookEndpoint.from_dict,
            body=replay_body(since, cursor),
            idempotent=False,
        )

    async def send_webhook_test(self, endpoint_id: str) -> WebhookTestQueued:
        """POST /webhooks/endpoints/{id}/test (202): a signed ``webhook.test`` message is queued;
        its ``webhook_id`` names it among the attempts."""
        return await self._call(
            "POST", endpoint_path(endpoint_id, "test"), WebhookTestQueued.from_dict, idempotent=False
        )


def _no_body(body: Any, meta: ResponseMeta) -> ResponseMeta:
    return meta
