"""The stream process: ``create_app(config)`` builds the aiohttp application serving
``{base_path}/stream`` (WebSocket) and the operator routes."""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import AsyncIterator

import asyncpg
import orjson
from aiohttp import WSMsgType, web

from ..common.access import AccessDenied, check_access
from ..common.config import Config
from ..common.db import create_pool, schema_ready
from ..common.ops import add_ops_routes, run_app
from ..common.retry import retry_transient
from ..common.tasks import background_task
from . import protocol
from .feed import Feed
from .hub import Hub
from .metrics import StreamMetrics

log = logging.getLogger(__name__)

CONFIG = web.AppKey("config", Config)
POOL = web.AppKey("pool", asyncpg.Pool)
HUB = web.AppKey("hub", Hub)
FEED = web.AppKey("feed", Feed)
METRICS = web.AppKey("metrics", StreamMetrics)


def refusal(status: int, code: str, message: str) -> web.Response:
    """A refused handshake: the HTTP status and the spec-7 JSON envelope, no upgrade."""
    return web.Response(
        status=status,
        body=orjson.dumps({"error": {"code": code, "message": message}}),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def stream(request: web.Request) -> web.StreamResponse:
    app = request.app
    try:
        principal = await check_access(app[POOL], request.query.get("key"))
    except AccessDenied as exc:
        app[METRICS].refused.labels(exc.denial.code).inc()
        return refusal(exc.denial.status, exc.denial.code, exc.denial.message)
    ws = web.WebSocketResponse(compress=False, autoping=True, max_msg_size=4096)
    if not ws.can_prepare(request).ok:
        return refusal(426, "UPGRADE_REQUIRED", "This endpoint speaks WebSocket only.")
    await ws.prepare(request)
    session_id = "ses_" + secrets.token_urlsafe(12)
    hub = app[HUB]
    conn = hub.open(ws, principal.workspace_id, principal.key_hash, session_id)
    hub.send(conn, protocol.ready(session_id), "ready")
    try:
        async for msg in ws:  # clients send nothing; anything they send is ignored
            if msg.type == WSMsgType.ERROR:
                break
    finally:
        await hub.forget(conn)
    return ws


async def _pinger(app: web.Application) -> None:
    interval = app[CONFIG].stream_ping_interval_s
    while True:
        await asyncio.sleep(interval)
        app[HUB].broadcast(protocol.ping(), "ping")


async def _pool_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    app[POOL] = await retry_transient(
        lambda: create_pool(config.database_url, config.read_model_schema, min_size=config.db_pool_min, max_size=config.db_pool_max),
        what="connect to PostgreSQL",
        cap=2.0,
    )
    app[FEED] = Feed(config, app[POOL], app[HUB], app[METRICS])
    yield
    await app[HUB].shutdown()
    await app[POOL].close()


def create_app(config: Config, metrics: StreamMetrics | None = None) -> web.Application:
    app = web.Application()
    app[CONFIG] = config
    app[METRICS] = metrics or StreamMetrics()
    app[HUB] = Hub(app[METRICS], config.stream_queue_size)
    app.cleanup_ctx.append(_pool_ctx)
    app.cleanup_ctx.append(background_task("feed", lambda a: a[FEED].run()))
    app.cleanup_ctx.append(background_task("pinger", _pinger))
    app.router.add_get(config.base_path + "/stream", stream, name="partner:stream")

    async def ready() -> tuple[bool, str]:
        if POOL not in app or FEED not in app:
            return False, "starting"
        if not await schema_ready(app[POOL], config.read_model_schema):
            return False, "read model not migrated"
        return (True, "ok") if app[FEED].started.is_set() else (False, "feed starting")

    add_ops_routes(app, app[METRICS].registry, ready)
    return app


async def serve(config: Config) -> None:
    await run_app(create_app(config), config.host, config.stream_port, name="stream")
