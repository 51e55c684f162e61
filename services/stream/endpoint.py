"""The ``{base_path}/stream`` handler: one handshake, then the connection's life.

A handshake passes the access gates (docs/api.md#access-gates) and takes a connection slot of the
workspace (a lease shared by every stream process); a refusal is the HTTP status with the
JSON error envelope (docs/api.md#error-envelope), no upgrade. Stream messages never touch the usage (quota) tables.

The handshake is read by :mod:`.handshake`, the slot kept by :mod:`.leases`. Once upgraded,
the connection is registered with the hub, which sends it every announcement from then on
(after its resume's replay, :mod:`.resume`, when it asked for one) until it closes.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass

from aiohttp import WSMsgType, web

from ..common.http.envelope import envelope
from ..common.http.requestlog import WORKSPACE_KEY
from ..readmodel import cursors
from ..readmodel.access import NOT_AUTHENTICATED, AccessDenied, Principal
from ..readmodel.consoles import redeem_ticket
from ..readmodel.filters import AnnouncementFilter
from . import protocol
from .handshake import handshake_error, presented_key, requested_filter, requested_resume
from .hub import limit_send_buffer
from .resume import replay
from .state import CONFIG, FEED, HUB, LEASES, METRICS, POOL, PRINCIPALS
from .wire import StreamResponse

log = logging.getLogger(__name__)

#: The access log's status of a handshake its client abandoned before the upgrade was sent
#: (nginx's "client closed request"): nothing was answered.
CLIENT_GONE = 499


@dataclass(frozen=True, slots=True)
class Admitted:
    """A handshake the gates let through: who asks, and what for."""

    principal: Principal
    filter: AnnouncementFilter
    #: Opted in to resume cursors (``cursors=true``, or a ``resume`` cursor).
    with_cursors: bool
    #: The cursor to resume from, or None (live from now).
    resume: cursors.Cursor | None


def limit_reached(limit: int, retry_after_s: float) -> web.Response:
    return envelope(
        429,
        protocol.STREAM_LIMIT_REACHED,
        f"This workspace already has {limit} open stream connections, its limit. "
        "Close one, or retry after a connection has closed.",
        retry_after_sec=max(int(retry_after_s), 1),
    )


def abandoned(request: web.Request, session_id: str, exc: ConnectionError) -> web.Response:
    """A client that went away during its handshake (closed or reset its connection while the
    process was busy or paused): its business, not a fault, so one INFO line with the cause
    and the access log's 499; aiohttp finds the connection gone and sends nothing."""
    log.info(
        "stream handshake abandoned by the client: %s: %s",
        type(exc).__name__,
        exc,
        extra={"fields": {"session_id": session_id}},
    )
    return web.Response(status=CLIENT_GONE)


async def stream(request: web.Request) -> web.StreamResponse:
    app = request.app
    admitted = await _admit(request)
    if isinstance(admitted, web.Response):
        return admitted
    feed = app[FEED]
    if admitted.with_cursors:
        if not feed.broadcaster.epoch:
            return envelope(503, "STREAM_STARTING", "The stream is starting; retry in a moment.", retry_after_sec=1)
        await feed.broadcaster.refresh_epoch()  # the cursors this connection gets are of the current epoch
    # heartbeat: a protocol-level ping; no answer within half of it closes the connection, so a
    # client whose network vanished frees its slot instead of holding it until TCP gives up.
    # compress: permessage-deflate when the client offers it and TICKERWIRE_STREAM_COMPRESS is on,
    # always without server context takeover, so each message is compressed once (frames.py).
    ws = StreamResponse(
        compress=app[CONFIG].stream_compress, autoping=True, max_msg_size=4096, heartbeat=app[CONFIG].stream_heartbeat_s
    )
    if not ws.can_prepare(request).ok:
        return envelope(
            426, "UPGRADE_REQUIRED", "This endpoint speaks WebSocket only.", headers={"Upgrade": "websocket"}
        )
    session_id = "ses_" + secrets.token_urlsafe(12)
    limit = admitted.principal.stream_connection_limit
    if limit is None:
        limit = app[CONFIG].stream_max_connections_per_workspace
    if not await app[LEASES].acquire(admitted.principal.workspace_id, session_id, limit):
        app[METRICS].refused.labels(protocol.STREAM_LIMIT_REACHED).inc()
        return limit_reached(limit, app[CONFIG].stream_lease_ttl_s)
    return await _connected(request, ws, admitted, session_id)


async def _principal(request: web.Request) -> Principal:
    """The key of the handshake through the gates: the presented key, or the key of the console
    session whose single-use ``ticket`` it presents (docs/console.md; used up here, whatever follows)."""
    app = request.app
    ticket = request.query.get("ticket")
    if ticket is None:
        return await app[PRINCIPALS].authorize(app[POOL], presented_key(request))
    held = await redeem_ticket(app[POOL], ticket, app[CONFIG].db_statement_timeout_s)
    if held is None:
        raise AccessDenied(NOT_AUTHENTICATED)
    key_hash, workspace_id = held
    principal = await app[PRINCIPALS].authorize_hash(app[POOL], key_hash)
    if principal.workspace_id != workspace_id:
        raise AccessDenied(NOT_AUTHENTICATED)
    return principal


async def _admit(request: web.Request) -> Admitted | web.Response:
    """The handshake read and its key through the gates, or the response refusing it (counted by
    its code): 400 malformed, the gates' 401/403, 422 for a filter or cursor breaking its grammar."""
    app = request.app
    refused = app[METRICS].refused
    malformed = handshake_error(request.headers)
    if malformed is not None:
        refused.labels("VALIDATION_FAILED").inc()
        return malformed
    try:
        principal = await _principal(request)
    except AccessDenied as exc:
        refused.labels(exc.denial.code).inc()
        return envelope(exc.denial.status, exc.denial.code, exc.denial.message)
    request[WORKSPACE_KEY] = principal.workspace_id  # for the access log
    stream_filter = requested_filter(request.query)
    if isinstance(stream_filter, web.Response):
        refused.labels("VALIDATION_FAILED").inc()
        return stream_filter
    opted = requested_resume(request.query)
    if isinstance(opted, web.Response):
        refused.labels("VALIDATION_FAILED").inc()
        return opted
    with_cursors, resume = opted
    return Admitted(principal, stream_filter, with_cursors, resume)


async def _connected(
    request: web.Request, ws: StreamResponse, admitted: Admitted, session_id: str
) -> web.StreamResponse:
    """From the slot taken to the connection closed: upgrade, register with the hub, ``ready``
    (or the resume's replay), then read until the client goes; the slot is always freed."""
    app = request.app
    hub, feed, leases = app[HUB], app[FEED], app[LEASES]
    conn = None
    replaying: asyncio.Task | None = None
    try:
        transport = request.transport
        limit_send_buffer(transport)
        try:
            await ws.prepare(request)
        except ConnectionError as exc:  # aiohttp's ClientConnectionResetError is one
            return abandoned(request, session_id, exc)
        principal, resume = admitted.principal, admitted.resume
        conn = hub.open(
            ws,
            transport,
            principal.workspace_id,
            principal.key_hash,
            session_id,
            admitted.filter,
            cursors=admitted.with_cursors,
            replaying=resume is not None,
        )
        # Read with no await since the registration: every announcement above it reaches the connection live.
        start = cursors.Cursor(feed.broadcaster.epoch, dict(feed.broadcaster.marks))
        if resume is not None:
            replaying = asyncio.create_task(
                replay(hub, feed, app[METRICS], conn, resume, start), name=f"ws-resume-{session_id}"
            )
        else:
            hub.send(conn, protocol.ready(session_id, start.encode() if admitted.with_cursors else None))
        async for msg in ws:  # clients send nothing; anything they send is ignored
            if msg.type == WSMsgType.ERROR:
                break
    finally:
        if replaying is not None:
            replaying.cancel()
            await asyncio.wait([replaying])
        if conn is not None:
            await hub.forget(conn)
        await asyncio.shield(leases.release(session_id))
    return ws
