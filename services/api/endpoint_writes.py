"""The partner's changes of its webhook endpoints (docs/api.md#managing-endpoints): create,
update, delete, pause, resume, rotate the secret, replay. Each builds the endpoint's next
snapshot with the operator commands' code (:mod:`..readmodel.endpoint_changes`; a create
counted against the cap and its Idempotency-Key by :mod:`..readmodel.endpoint_cap`) on the
primary, publishes it (:mod:`.publisher`), and waits, at most :data:`SHOWN_WITHIN_S`, until the
primary's read model shows the new version, so the answer reflects it
(docs/webhooks.md#read-your-writes). Only the key's workspace's endpoints are ever changed: any
other id is the 404 of an unknown one."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

import asyncpg
import orjson
from aiohttp import web

from tickerwire.schemas.models import WebhookEndpointEvent

from ..common.db import storage_errors
from ..common.http.envelope import ApiError
from ..common.http.requestlog import WORKSPACE_KEY
from ..common.runtime.errors import ConfigError
from ..readmodel import endpoint_cap, endpoint_changes as changes
from ..readmodel.logposition import LogPosition
from ..readmodel.replaystart import checked_cursor, since_cursor
from ..readmodel.snapshots import AdminError
from . import endpoint_bodies as bodies, partner, queries
from .errors import not_found
from .state import CATALOG, CONFIG, POOL, PUBLISHER, REQUEST_LOG_POSITION

#: How long an answer waits for the read model to show the change.
SHOWN_WITHIN_S = 10.0
#: How long a change waits for a connection to the primary (longer than a read's: a burst of
#: creates of one workspace queues on its lock).
WRITE_ACQUIRE_S = 5.0

NO_WEBHOOK_ENDPOINT = "No webhook endpoint of this workspace has this id."
_STATUS = {
    "CURSOR_EPOCH_CHANGED": 409,
    "ENDPOINT_LIMIT": 409,
    "IDEMPOTENCY_KEY_REUSED": 409,
    "INVALID_STATE": 409,
    "VALIDATION_FAILED": 400,
}
_PARTNER_WORDS = {
    "ENDPOINT_LIMIT": f"This workspace has {endpoint_cap.MAX_ENDPOINTS_PER_WORKSPACE} webhook endpoints, the most "
    "it may have; delete one first.",
    "IDEMPOTENCY_KEY_REUSED": "This Idempotency-Key was used with another request in the last 24 hours; "
    "use a new key for a new request.",
}


def _refusal(exc: AdminError) -> ApiError:
    if exc.code == "NOT_FOUND":
        return not_found(NO_WEBHOOK_ENDPOINT)
    message = _PARTNER_WORDS.get(exc.code, str(exc))
    return ApiError(_STATUS.get(exc.code, 409), exc.code, message, field=exc.field)


def _signing_key(request: web.Request) -> bytes:
    """The signing key, or the 503 of an API that has none (docs/configuration.md): the changes
    are off, every read still answers."""
    try:
        return request.app[CONFIG].signing_key()
    except ConfigError:
        raise ApiError(
            503,
            "SERVICE_UNAVAILABLE",
            "Webhook endpoint changes are not available on this server (no signing key is configured); "
            "reading endpoints still works.",
            retry_after_sec=60,
        ) from None


def _endpoint_id(request: web.Request) -> str:
    segment = request.match_info["id"]
    if "\x00" in segment or len(segment) > 300:
        raise not_found(NO_WEBHOOK_ENDPOINT)
    return segment


async def _on_primary(request: web.Request, work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
    try:
        with storage_errors("webhook endpoint change"):
            async with request.app[POOL].acquire(timeout=WRITE_ACQUIRE_S) as conn:
                return await work(conn)
    except AdminError as exc:
        raise _refusal(exc) from None


async def _shown(request: web.Request, endpoint_id: str, version: int | None) -> dict | None:
    """The endpoint as the primary's read model shows it once it holds ``version`` (None: any),
    else the 503 of a change published but not shown within :data:`SHOWN_WITHIN_S`. None: it is
    shown removed (or was never this workspace's)."""
    pool, deadline = request.app[POOL], time.monotonic() + SHOWN_WITHIN_S
    while True:
        with storage_errors("webhook endpoint change"):
            async with pool.acquire(timeout=WRITE_ACQUIRE_S) as conn:
                stored = await conn.fetchval("SELECT version FROM webhook_endpoints WHERE id = $1", endpoint_id)
                if stored is not None and (version is None or stored >= version):
                    rows = await conn.fetch(
                        queries.SELECT_WEBHOOK_ENDPOINTS,
                        request[WORKSPACE_KEY],
                        endpoint_id,
                        request.app[CATALOG].log_topic,
                    )
                    request[REQUEST_LOG_POSITION] = LogPosition.stored(rows[0]["log_position"])
                    return partner.webhook_endpoint_item(rows[0]) if rows[0]["id"] is not None else None
        if time.monotonic() >= deadline:
            raise ApiError(
                503,
                "SERVICE_UNAVAILABLE",
                f"The change was published but the read model has not shown it within {SHOWN_WITHIN_S:g} s; "
                "it will apply: GET the endpoint shortly (a create retried with its Idempotency-Key answers "
                "its secret).",
                retry_after_sec=1,
            )
        await asyncio.sleep(0.05)


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json", headers=headers)


def _location(request: web.Request, endpoint_id: str) -> dict[str, str]:
    return {"Location": f"{request.app[CONFIG].base_path}/webhooks/endpoints/{endpoint_id}"}


async def _publish(request: web.Request, event: WebhookEndpointEvent) -> None:
    await request.app[PUBLISHER].publish(event)


# --------------------------------------------------------------------------- the operations


async def create_endpoint(request: web.Request) -> web.Response:
    signing_key = _signing_key(request)
    raw = await bodies.json_object(request)
    body = bodies.parsed(bodies.EndpointCreate, raw)
    key = bodies.idempotency_key(request)
    filters = bodies.filters(body, set(changes.FILTERS))
    config, workspace = request.app[CONFIG], request[WORKSPACE_KEY]
    try:
        await changes.refuse_target(body.url, opened=config.open_targets(), operator=False)
    except AdminError as exc:
        raise _refusal(exc) from None

    async def work(conn: asyncpg.Connection) -> tuple[WebhookEndpointEvent, endpoint_cap.Earlier | None]:
        event = await changes.register_event(
            conn,
            workspace_id=workspace,
            url=body.url,
            topic=request.app[CATALOG].log_topic,
            description=body.description,
            locales=filters["locales"],
            tickers=filters["tickers"],
            categories=filters["categories"],
        )
        earlier = await endpoint_cap.create(
            conn, event, lambda e: _publish(request, e), key=key, digest=endpoint_cap.request_digest(raw)
        )
        return event, earlier

    event, earlier = await _on_primary(request, work)
    endpoint_id = earlier.endpoint_id if earlier is not None else event.data.id
    if earlier is not None and earlier.response is not None:
        item = earlier.response
    else:
        pending = earlier.pending if earlier is not None else event
        shown = await _shown(request, endpoint_id, pending.version if pending is not None else None)
        if shown is None:
            raise not_found(NO_WEBHOOK_ENDPOINT)
        item = shown
        if key is not None:
            await _on_primary(request, lambda conn: endpoint_cap.answered(conn, workspace, key, item))
    secret = changes.shown_secret(signing_key, endpoint_id, 1)
    return _json({"endpoint": item, "secret": secret}, 201, _location(request, endpoint_id))


async def _changed(request: web.Request, build: Callable[[asyncpg.Connection, str, str], Awaitable[Any]]) -> Any:
    """Build the endpoint's next snapshot (or a :class:`..readmodel.endpoint_changes.Rotation`),
    publish it, and answer once it is shown."""
    endpoint_id, workspace = _endpoint_id(request), request[WORKSPACE_KEY]

    async def work(conn: asyncpg.Connection) -> Any:
        return await build(conn, endpoint_id, workspace)

    changed = await _on_primary(request, work)
    event = changed.event if isinstance(changed, changes.Rotation) else changed
    await _publish(request, event)
    return event, await _shown(request, endpoint_id, event.version)


async def update_endpoint(request: web.Request) -> web.Response:
    _signing_key(request)
    body = bodies.parsed(bodies.EndpointUpdate, await bodies.json_object(request))
    wanted = bodies.update_fields(body)
    if "url" in wanted:
        try:
            await changes.refuse_target(wanted["url"], opened=request.app[CONFIG].open_targets(), operator=False)
        except AdminError as exc:
            raise _refusal(exc) from None
    _, item = await _changed(request, lambda conn, id_, ws: changes.update_event(conn, id_, wanted, ws))
    return _answer(item)


def _answer(item: dict | None, status: int = 200) -> web.Response:
    if item is None:  # removed between the change and the answer, by another request
        raise not_found(NO_WEBHOOK_ENDPOINT)
    return _json(item, status)


def status_change(action: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``pause``, ``resume`` (200 with the endpoint) or ``remove`` (the DELETE: 204)."""

    async def handler(request: web.Request) -> web.Response:
        _signing_key(request)
        _, item = await _changed(request, lambda conn, id_, ws: changes.status_event(conn, id_, action, ws))
        if action == "remove":
            return web.Response(status=204)
        return _answer(item)

    return handler


async def rotate_secret(request: web.Request) -> web.Response:
    signing_key = _signing_key(request)
    window = request.app[CONFIG].webhooks_rotation_window_s
    event, item = await _changed(request, lambda conn, id_, ws: changes.rotation_event(conn, id_, window, ws))
    if item is None:
        raise not_found(NO_WEBHOOK_ENDPOINT)
    secret = changes.shown_secret(signing_key, event.data.id, event.data.secret_generation)
    return _json({"endpoint": item, "secret": secret})


async def replay_endpoint(request: web.Request) -> web.Response:
    _signing_key(request)
    cursor, since = bodies.replay_start(bodies.parsed(bodies.ReplayRequest, await bodies.json_object(request)))
    config, topic = request.app[CONFIG], request.app[CATALOG].log_topic

    async def build(conn: asyncpg.Connection, endpoint_id: str, workspace: str) -> WebhookEndpointEvent:
        await changes.endpoint_row(conn, endpoint_id, workspace)  # a 404 before the cursor is looked at
        if cursor is not None:
            start = await checked_cursor(conn, topic, cursor, option="cursor")
        else:
            assert since is not None
            start = await since_cursor(config, conn, topic, since)
        return await changes.replay_event(conn, endpoint_id, start, workspace)

    _, item = await _changed(request, build)
    return _answer(item, 202)
