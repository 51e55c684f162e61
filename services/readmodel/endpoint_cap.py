"""The cap on a workspace's webhook endpoints and the Idempotency-Key of a create, held under
concurrency for the API and ``tickerwire webhooks register`` alike (docs/webhooks.md#the-cap-and-idempotency).

A create runs :func:`reserve` in one transaction on the primary, under the workspace's
transaction lock (``pg_advisory_xact_lock``): it counts the endpoints the read model shows that
are not removed plus the reservations it does not show yet, refuses at
:data:`MAX_ENDPOINTS_PER_WORKSPACE`, and records the new endpoint's reservation (with its
snapshot) and the Idempotency-Key. The caller publishes after the commit. Two creates of one
workspace never count at once, and a reservation counts until the read model shows its endpoint,
so concurrent creates of any number of processes never pass the cap.

When the publish fails after the reservation: the caller :func:`release`\\ s it when no
Idempotency-Key holds it (the create answered an error, and a publish that reached the broker
after all counts once the endpoint is projected); a keyed one stays, so the retry with the same
key publishes the same snapshot again (same endpoint id, same version: the projector keeps one
endpoint, never two). Either way a reservation counts for at most :data:`RESERVATION_TTL_S`, so
a failure (or a process killed between reserving and publishing) never lowers the cap for good.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import asyncpg
import orjson

from tickerwire.schemas.models import WebhookEndpointEvent, decode_event, encode_event

from .snapshots import AdminError

#: Endpoints a workspace may have that are not removed (``GET /webhooks/endpoints`` lists them all).
MAX_ENDPOINTS_PER_WORKSPACE = 100

#: How long a reservation counts while the read model does not show its endpoint.
RESERVATION_TTL_S = 900

#: How long an Idempotency-Key answers the same.
IDEMPOTENCY_TTL_S = 86_400

#: The advisory lock space of the per-workspace create lock (the first key of the two-int form).
LOCK_SPACE = 0x7477_6865  # "twhe"

_LOCK = "SELECT pg_advisory_xact_lock($1, hashtext($2))"

_SET_TIMEOUT = "SELECT set_config('statement_timeout', $1, true)"

#: Bound of waiting for the workspace's lock (its creates run one at a time, each a few statements).
LOCK_WAIT_S = 10.0

_COUNT = """
SELECT (SELECT count(*) FROM webhook_endpoints WHERE workspace_id = $1 AND status <> 'removed')
     + (SELECT count(*) FROM webhook_reservations r
        WHERE r.workspace_id = $1 AND r.reserved_at > now() - make_interval(secs => $2)
          AND NOT EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = r.endpoint_id))
"""

# The workspace's reservations the read model shows, or expired; its keys past their day.
_TIDY = """
WITH gone AS (
    DELETE FROM webhook_reservations r WHERE r.workspace_id = $1 AND (
        r.reserved_at <= now() - make_interval(secs => $2)
        OR EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = r.endpoint_id))
)
DELETE FROM webhook_idempotency WHERE workspace_id = $1 AND created_at <= now() - make_interval(secs => $3)
"""


def request_digest(body: Any) -> bytes:
    """The sha256 of a create's request (its parsed body, keys sorted): what an Idempotency-Key
    is held to."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()


@dataclass(frozen=True, slots=True)
class Earlier:
    """The create an Idempotency-Key already made: its endpoint, its answer once given (without
    the secret), and its snapshot while the read model does not show it yet (to publish again)."""

    endpoint_id: str
    response: dict | None
    pending: WebhookEndpointEvent | None


async def _earlier(conn: asyncpg.Connection, workspace_id: str, key: str, digest: bytes) -> Earlier | None:
    row = await conn.fetchrow(
        "SELECT request_sha, endpoint_id, response FROM webhook_idempotency "
        "WHERE workspace_id = $1 AND key = $2 AND created_at > now() - make_interval(secs => $3)",
        workspace_id,
        key,
        float(IDEMPOTENCY_TTL_S),
    )
    if row is None:
        return None
    if bytes(row["request_sha"]) != digest:
        raise AdminError(
            "this Idempotency-Key was used with another request in the last 24 hours; use a new key",
            code="IDEMPOTENCY_KEY_REUSED",
        )
    pending = await conn.fetchval(
        "SELECT r.event FROM webhook_reservations r WHERE r.endpoint_id = $1 "
        "AND NOT EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = r.endpoint_id)",
        row["endpoint_id"],
    )
    response = orjson.loads(row["response"]) if row["response"] is not None else None
    event = decode_event(pending.encode()) if pending is not None else None
    assert event is None or isinstance(event, WebhookEndpointEvent)
    return Earlier(row["endpoint_id"], response, event)


async def reserve(
    conn: asyncpg.Connection,
    event: WebhookEndpointEvent,
    *,
    key: str | None = None,
    digest: bytes = b"",
) -> Earlier | None:
    """Count ``event``'s new endpoint against its workspace's cap and reserve it (with ``key``,
    the Idempotency-Key, and ``digest``, its request's :func:`request_digest`), in one
    transaction under the workspace's lock. None: reserved, publish it. An :class:`Earlier`:
    the key made a create already (the same request), answer that one. AdminError with code
    ENDPOINT_LIMIT at the cap, IDEMPOTENCY_KEY_REUSED for a key used with another request."""
    workspace_id = event.data.workspace_id
    async with conn.transaction():
        # The wait for the lock has its own bound, not the session's statement timeout (the API's 1.5 s).
        bound = await conn.fetchval("SELECT current_setting('statement_timeout')")
        await conn.execute(_SET_TIMEOUT, f"{int(LOCK_WAIT_S * 1000)}ms")
        await conn.execute(_LOCK, LOCK_SPACE, workspace_id, timeout=LOCK_WAIT_S + 1)
        await conn.execute(_SET_TIMEOUT, bound)
        await conn.execute(_TIDY, workspace_id, float(RESERVATION_TTL_S), float(IDEMPOTENCY_TTL_S))
        if key is not None and (earlier := await _earlier(conn, workspace_id, key, digest)) is not None:
            return earlier
        count = await conn.fetchval(_COUNT, workspace_id, float(RESERVATION_TTL_S))
        if count >= MAX_ENDPOINTS_PER_WORKSPACE:
            raise AdminError(
                f"workspace {workspace_id} has {count} endpoints, the most it may have; remove one first",
                code="ENDPOINT_LIMIT",
            )
        await conn.execute(
            "INSERT INTO webhook_reservations (endpoint_id, workspace_id, event) VALUES ($1, $2, $3::jsonb)",
            event.data.id,
            workspace_id,
            encode_event(event).decode(),
        )
        if key is not None:
            await conn.execute(
                "INSERT INTO webhook_idempotency (workspace_id, key, request_sha, endpoint_id) VALUES ($1, $2, $3, $4)",
                workspace_id,
                key,
                digest,
                event.data.id,
            )
    return None


async def release(conn: asyncpg.Connection, event: WebhookEndpointEvent) -> None:
    """Give back the reservation of a create whose publish failed and that no key holds."""
    await conn.execute("DELETE FROM webhook_reservations WHERE endpoint_id = $1", event.data.id)


async def answered(conn: asyncpg.Connection, workspace_id: str, key: str, response: dict) -> None:
    """Keep what a keyed create answered (without its secret), to answer its retries the same."""
    await conn.execute(
        "UPDATE webhook_idempotency SET response = $3::jsonb WHERE workspace_id = $1 AND key = $2",
        workspace_id,
        key,
        orjson.dumps(response).decode(),
    )


async def create(
    conn: asyncpg.Connection,
    event: WebhookEndpointEvent,
    publish: Callable[[WebhookEndpointEvent], Awaitable[object]],
    *,
    key: str | None = None,
    digest: bytes = b"",
) -> Earlier | None:
    """Reserve ``event``'s endpoint (:func:`reserve`) and publish it: None when it was. With a
    key that made a create already, that create (its snapshot published again while the read
    model does not show it). A failed publish releases the reservation unless a key holds it."""
    earlier = await reserve(conn, event, key=key, digest=digest)
    if earlier is not None:
        if earlier.pending is not None:
            await publish(earlier.pending)
        return earlier
    try:
        await publish(event)
    except BaseException:
        if key is None:
            await release(conn, event)
        raise
    return None
