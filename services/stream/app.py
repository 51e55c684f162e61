"""The stream process: ``create_app(config)`` builds the aiohttp application serving
``{base_path}/stream`` (WebSocket); the operator routes are on its admin listener.

A handshake passes the access gates (docs/api.md#access-gates) and takes a connection slot of the
workspace (a lease shared by every stream process); a refusal is the HTTP status with the
JSON error envelope (docs/api.md#error-envelope), no upgrade. Stream messages never touch the usage (quota) tables.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import AsyncIterator

import asyncpg
from aiohttp import WSMsgType, web

from tickerwire.schemas.topics import POSTS, topic_name

from ..common.db import reader_pool, storage_errors
from ..common.db.replicas import Replicas
from ..common.http.envelope import envelope
from ..common.http.keys import authorization, bearer_key
from ..common.http.requestlog import WORKSPACE_KEY, add_request_log
from ..common.kafka.topicgate import TOPIC_GATE, TopicGate, install
from ..common.kafka.watch import watch_broker
from ..common.operator.endpoints import add_ops_routes, run_app
from ..common.operator.readiness import Readiness, failing_of, service_readiness
from ..common.runtime.config import Config
from ..common.runtime.errors import InvalidParameter, StorageUnavailable
from ..common.runtime.supervise import Supervisor, supervisor_of
from ..readmodel import cursors
from ..readmodel.access import AccessDenied, Principals
from ..readmodel.stamps import StampWatcher
from ..readmodel.taxonomy import served_locales
from . import protocol
from .errors import error_middleware
from .feed import Feed
from .filters import StreamFilter, parse_filter
from .handshake import handshake_error
from .hub import Connection, Hub, limit_send_buffer
from .leases import Leases
from .metrics import StreamMetrics
from .replicated import replicated, stream_replicas
from .watchdog import recheck, run_watchdog
from .wire import StreamResponse

log = logging.getLogger(__name__)

CONFIG = web.AppKey("config", Config)
POOL = web.AppKey("pool", asyncpg.Pool)
HUB = web.AppKey("hub", Hub)
FEED = web.AppKey("feed", Feed)
LEASES = web.AppKey("leases", Leases)
METRICS = web.AppKey("metrics", StreamMetrics)
PRINCIPALS = web.AppKey("principals", Principals)
WATCHER = web.AppKey("watcher", StampWatcher)
REPLICAS = web.AppKey("replicas", Replicas)

#: Announcements read per query of a resume's replay.
RESUME_PAGE = 1_000


def limit_reached(limit: int, retry_after_s: float) -> web.Response:
    return envelope(
        429,
        protocol.STREAM_LIMIT_REACHED,
        f"This workspace already has {limit} open stream connections, its limit. "
        "Close one, or retry after a connection has closed.",
        retry_after_sec=max(int(retry_after_s), 1),
    )


def presented_key(request: web.Request) -> str | None:
    """The key of the handshake: the ``key`` query parameter (docs/api.md#stream-key) when it is non-empty, else
    an ``Authorization: Bearer <key>`` header, as on HTTP. Either way the same gates apply."""
    return request.query.get("key") or bearer_key(authorization(request.headers))


def requested_resume(request: web.Request) -> tuple[bool, cursors.Cursor | None] | web.Response:
    """The cursor opt-in (``cursors=true``, or a ``resume`` cursor) and the cursor to resume
    from, or the 422 refusing a ``resume`` that is not a cursor."""
    token = request.query.get("resume")
    if token is not None:  # an empty one is not a cursor either
        try:
            return True, cursors.decode(token)
        except cursors.InvalidCursor:
            request.app[METRICS].refused.labels("VALIDATION_FAILED").inc()
            return envelope(
                422,
                "VALIDATION_FAILED",
                "resume must be a cursor token from this stream (ready or "
                f"post.created cursor) or GET /changes; got {token[:40]!r}.",
                field="resume",
            )
    flag = request.query.get("cursors", "").lower()
    if flag not in ("", "true", "1", "false", "0"):
        request.app[METRICS].refused.labels("VALIDATION_FAILED").inc()
        return envelope(422, "VALIDATION_FAILED", f"cursors must be true or false; got {flag[:40]!r}.", field="cursors")
    return flag in ("true", "1"), None


#: The access log's status of a handshake its client abandoned before the upgrade was sent
#: (nginx's "client closed request"): nothing was answered.
CLIENT_GONE = 499


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


def requested_filter(request: web.Request) -> StreamFilter | web.Response:
    """The connection's opt-in filter, or the 422 refusing a value that breaks the grammar."""
    try:
        return parse_filter(request.query)
    except InvalidParameter as exc:
        request.app[METRICS].refused.labels("VALIDATION_FAILED").inc()
        return envelope(422, "VALIDATION_FAILED", exc.message, field=exc.field)


async def stream(request: web.Request) -> web.StreamResponse:
    app = request.app
    metrics = app[METRICS]
    malformed = handshake_error(request.headers)
    if malformed is not None:
        metrics.refused.labels("VALIDATION_FAILED").inc()
        return malformed
    try:
        principal = await app[PRINCIPALS].authorize(app[POOL], presented_key(request))
    except AccessDenied as exc:
        metrics.refused.labels(exc.denial.code).inc()
        return envelope(exc.denial.status, exc.denial.code, exc.denial.message)
    request[WORKSPACE_KEY] = principal.workspace_id  # for the access log
    stream_filter = requested_filter(request)
    if isinstance(stream_filter, web.Response):
        return stream_filter
    opted = requested_resume(request)
    if isinstance(opted, web.Response):
        return opted
    with_cursors, resume = opted
    feed = app[FEED]
    if with_cursors:
        if not feed.epoch:
            return envelope(503, "STREAM_STARTING", "The stream is starting; retry in a moment.", retry_after_sec=1)
        await feed.refresh_epoch()  # the cursors this connection gets are of the current epoch
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
    limit = principal.stream_connection_limit
    if limit is None:
        limit = app[CONFIG].stream_max_connections_per_workspace
    leases = app[LEASES]
    if not await leases.acquire(principal.workspace_id, session_id, limit):
        metrics.refused.labels(protocol.STREAM_LIMIT_REACHED).inc()
        return limit_reached(limit, app[CONFIG].stream_lease_ttl_s)
    hub = app[HUB]
    conn = None
    replay: asyncio.Task | None = None
    try:
        transport = request.transport
        limit_send_buffer(transport)
        try:
            await ws.prepare(request)
        except ConnectionError as exc:  # aiohttp's ClientConnectionResetError is one
            return abandoned(request, session_id, exc)
        conn = hub.open(
            ws,
            transport,
            principal.workspace_id,
            principal.key_hash,
            session_id,
            stream_filter,
            cursors=with_cursors,
            replaying=resume is not None,
        )
        # Read with no await since the registration: every announcement above it reaches the connection live.
        start = cursors.Cursor(feed.epoch, dict(feed.marks))
        if resume is not None:
            replay = asyncio.create_task(_resume(app, conn, resume, start), name=f"ws-resume-{session_id}")
        else:
            hub.send(conn, protocol.ready(session_id, start.encode() if with_cursors else None))
        async for msg in ws:  # clients send nothing; anything they send is ignored
            if msg.type == WSMsgType.ERROR:
                break
    finally:
        if replay is not None:
            replay.cancel()
            await asyncio.wait([replay])
        if conn is not None:
            await hub.forget(conn)
        await asyncio.shield(leases.release(session_id))
    return ws


async def _resume(app: web.Application, conn: Connection, resume: cursors.Cursor, start: cursors.Cursor) -> None:
    """Replay from the read model every announcement after ``resume`` up to ``start`` (where the
    connection went live) that its filter admits, then the live messages held meanwhile.
    ``ready`` says whether it resumed; a cursor of another epoch is refused (``resumed: false``)
    and the connection goes on live from ``start``."""
    hub, feed, metrics = app[HUB], app[FEED], app[METRICS]
    try:
        with storage_errors("resume"):
            served = await served_locales(feed.db)
            langs = served if conn.filter.langs is None else served & {lang.lower() for lang in conn.filter.langs}
            marks = dict(resume.marks)
            first = True
            while True:
                page = await cursors.read_changes(
                    feed.db,
                    feed.topic,
                    marks,
                    langs,
                    tickers=conn.filter.tickers,
                    categories=conn.filter.categories,
                    limit=RESUME_PAGE,
                    upto=start.marks,
                )
                if first:
                    first = False
                    if (refusal := _refusal(resume, start, page)) is not None:
                        metrics.resumes.labels("refused").inc()
                        conn.skip = None
                        await hub.put(conn, protocol.ready(conn.session_id, start.encode(), False, refusal))
                        break
                    # Announcements the cursor already holds that the feed has not passed yet are not sent again live.
                    conn.skip = {p: m for p, m in resume.marks.items() if m > start.mark(p)} or None
                    await hub.put(conn, protocol.ready(conn.session_id, resume.encode(), True))
                for item in page.items:
                    cursors.advance(marks, item.partition, (item.offset, item.lang))
                    await hub.put(
                        conn,
                        protocol.post_created(
                            item.lean, item.partition, item.offset, cursors.encode(resume.epoch, marks)
                        ),
                    )
                metrics.replayed.inc(len(page.items))
                if len(page.items) < RESUME_PAGE:
                    metrics.resumes.labels("resumed").inc()
                    break
        await hub.go_live(conn)
    except StorageUnavailable:
        log.warning("resume failed: the read model is unavailable", extra={"fields": {"session_id": conn.session_id}})
        hub.close(conn, protocol.CLOSE_TRY_AGAIN_LATER, protocol.RESUME_FAILED_REASON)


def _refusal(resume: cursors.Cursor, start: cursors.Cursor, page: cursors.Changes) -> tuple[str, str] | None:
    """Why ``resume`` is refused (a cursor of another epoch, or one this read model cannot have
    issued, judged by the frontier read with the replay's first page), or None."""
    if page.epoch != resume.epoch or page.epoch != start.epoch:
        return protocol.RESUME_EPOCH_CHANGED, cursors.EPOCH_CHANGED_MESSAGE
    if (why := cursors.not_issued(resume, page.frontier)) is not None:
        log.info("resume refused: %s", why)
        return protocol.RESUME_NOT_ISSUED, cursors.NOT_ISSUED_MESSAGE.format(why=why)
    return None


async def _pinger(app: web.Application) -> None:
    interval = app[CONFIG].stream_ping_interval_s
    hub = app[HUB]
    while True:
        await asyncio.sleep(interval)
        hub.broadcast(protocol.ping())


async def _pool_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    app[POOL] = await reader_pool(config, failing_of(app))
    app[LEASES] = Leases(
        app[POOL], config.stream_lease_ttl_s, config.stream_lease_renew_s, acquire_timeout_s=config.db_acquire_timeout_s
    )
    app[FEED] = Feed(config, app[POOL], app[HUB], app[METRICS])
    if app[REPLICAS]:  # read-your-stream through the API's replicas (replicated.py)
        app[FEED].before_announce = lambda records: replicated(app[REPLICAS], records)
    yield
    await app[LEASES].close()
    await app[POOL].close()


async def _refresh(app: web.Application) -> None:
    """Principals up to the ``access`` stamp; after a reload, open connections are re-checked at once."""
    if await app[PRINCIPALS].refresh(app[POOL]):
        await recheck(app[PRINCIPALS], app[POOL], app[HUB], after_reload=True)


async def _close_connections(app: web.Application) -> None:
    """on_shutdown (before the server stops): 1001 to every client, then free their slots."""
    await app[HUB].shutdown()
    if LEASES in app:
        await app[LEASES].release_all()


def create_app(config: Config, metrics: StreamMetrics | None = None) -> web.Application:
    app = web.Application(
        middlewares=[error_middleware(config.base_path, max_body=config.max_body_bytes)],
        client_max_size=config.max_body_bytes,
    )
    add_request_log(app)
    app[CONFIG] = config
    app[METRICS] = metrics or StreamMetrics()
    app[HUB] = Hub(app[METRICS], config.stream_queue_size)
    app[PRINCIPALS] = principals = Principals(acquire_timeout_s=config.db_acquire_timeout_s)
    app[WATCHER] = principals.watcher = StampWatcher(config.database_url, lambda: _refresh(app))
    app[METRICS].access_stamp.set_function(lambda: -1 if principals.stamp is None else principals.stamp)
    app[REPLICAS] = stream_replicas(config, topic_name(config.topic_prefix, POSTS), app[METRICS].registry)
    app.cleanup_ctx.append(_pool_ctx)
    install(app, TopicGate(config, app[METRICS].registry, create=False))
    supervisor = supervisor_of(app)
    if app[REPLICAS]:
        app.cleanup_ctx.append(supervisor.task("replicas", lambda a: a[REPLICAS].run(a[POOL])))
    app.cleanup_ctx.append(supervisor.task("change-stamps", lambda a: a[WATCHER].run()))
    app.cleanup_ctx.append(supervisor.task("feed", lambda a: a[FEED].run()))
    app.cleanup_ctx.append(supervisor.task("broker-watch", lambda a: watch_broker(config, failing_of(a))))
    app.cleanup_ctx.append(supervisor.task("pinger", _pinger))
    app.cleanup_ctx.append(supervisor.task("leases", lambda a: a[LEASES].run(_on_lease_lost(a[HUB]))))
    app.cleanup_ctx.append(
        supervisor.task(
            "access-watchdog", lambda a: run_watchdog(a[PRINCIPALS], a[POOL], a[HUB], a[CONFIG].stream_access_recheck_s)
        )
    )
    app.on_shutdown.append(_close_connections)
    app.router.add_get(config.base_path + "/stream", stream, name="partner:stream")
    add_ops_routes(app, app[METRICS].registry, readiness(app, supervisor))
    return app


def readiness(app: web.Application, supervisor: Supervisor) -> Readiness:
    """Ready when PostgreSQL and the broker answer, the feed (consumer and announcer) runs and
    the in-memory access state is confirmed current with its listener up."""
    ready = service_readiness(app[CONFIG], lambda: app.get(POOL), supervisor, failing=failing_of(app), broker=True)

    async def feed() -> tuple[bool, str]:
        return app[FEED].check() if FEED in app else (False, "starting")

    async def access() -> tuple[bool, str]:
        if not app[PRINCIPALS].loaded:
            return False, "principals not loaded yet"
        return app[WATCHER].status()

    ready.add("topics", app[TOPIC_GATE].check)
    ready.add("feed", feed)
    ready.add("access", access)
    if app[REPLICAS]:
        ready.add("replicas", lambda: _replicas_check(app))
    return ready


async def _replicas_check(app: web.Application) -> tuple[bool, str]:
    return app[REPLICAS].check()


def _on_lease_lost(hub: Hub):
    def on_lost(session_ids: set[str]) -> None:
        hub.close_sessions(session_ids, protocol.CLOSE_TRY_AGAIN_LATER, protocol.LEASE_LOST_REASON)

    return on_lost


async def serve(config: Config) -> None:
    await run_app(
        create_app(config), config, name="stream", port=config.stream_port, admin_port=config.stream_admin_port
    )
