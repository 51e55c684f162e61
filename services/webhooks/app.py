"""The webhook dispatcher process (docs/webhooks.md): no partner port; its operator endpoints
on the admin listener. ``create_app(config)`` returns the aiohttp application; the pool, the
HTTP client, the change-stamp watcher and the scheduling round live in its ``cleanup_ctx``.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import AsyncIterator

import asyncpg
from aiohttp import web

from tickerwire.schemas.topics import POSTS, topic_name

from ..common.db import BACKGROUND_ACQUIRE_TIMEOUT_S, reader_pool, storage_errors
from ..common.operator.admin_listener import add_ops_routes, run_app
from ..common.operator.app_tracing import TRACING, install_tracing
from ..common.operator.readiness import Readiness, failing_of, service_readiness
from ..common.runtime.supervise import Supervisor, supervisor_of
from ..readmodel import stamps as stamp
from ..readmodel.stamps import StampWatcher
from .dispatcher import Dispatcher
from .metrics import WebhookMetrics
from .sender import Sender
from .settings import WebhooksConfig
from .store import Store
from .worker import WorkerContext

log = logging.getLogger(__name__)

CONFIG = web.AppKey("config", WebhooksConfig)
METRICS = web.AppKey("metrics", WebhookMetrics)
POOL = web.AppKey("pool", asyncpg.Pool)
DISPATCHER = web.AppKey("dispatcher", Dispatcher)
WATCHER = web.AppKey("watcher", StampWatcher)

#: A round runs every second; this much silence means the dispatcher is stuck.
ROUND_STALL_S = 10.0
_WATCHED = (stamp.POSTS, stamp.WEBHOOKS)
_SELECT_STAMPS = "SELECT name, stamp FROM change_stamps WHERE name = ANY($1::text[])"


def owner_name() -> str:
    """This process's name in the leases it holds (pg_stat_activity-style: host and pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def _dispatcher_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    # An acknowledged cursor is durable once stored, whatever the server's default: with
    # ``synchronous_commit = off`` a crash of PostgreSQL forgets the last instant of commits, and
    # the endpoint's next holder would send it older messages after newer ones.
    app[POOL] = await reader_pool(config, failing_of(app), synchronous_commit="on")
    sender = Sender(
        timeout_s=config.webhooks_attempt_timeout_s,
        max_connections=config.webhooks_max_endpoints,
        opened=config.open_targets(),
    )
    context = WorkerContext(
        config,
        Store(app[POOL], owner_name(), config.webhooks_lease_ttl_s),
        sender,
        app[METRICS],
        topic_name(config.topic_prefix, POSTS),
        config.signing_key(),
        app[TRACING],
    )
    app[DISPATCHER] = Dispatcher(context)
    yield
    await sender.close()
    await app[POOL].close()


def create_app(config: WebhooksConfig, metrics: WebhookMetrics | None = None) -> web.Application:
    config.signing_key()  # fails loudly, naming the setting, before anything starts
    app = web.Application()
    app[CONFIG] = config
    app[METRICS] = metrics or WebhookMetrics()
    install_tracing(app, "tickerwire-dispatcher", app[METRICS].registry)
    seen: dict[str, int] = {}

    async def refresh() -> None:
        """A new post wakes the idle workers; an endpoint change starts a round."""
        if POOL not in app or DISPATCHER not in app:
            return
        with storage_errors("read the change stamps"):
            rows = await app[POOL].fetch(_SELECT_STAMPS, list(_WATCHED), timeout=BACKGROUND_ACQUIRE_TIMEOUT_S)
        now = {r["name"]: r["stamp"] for r in rows}
        if now.get(stamp.POSTS) != seen.get(stamp.POSTS):
            app[DISPATCHER].posts_changed()
        if now.get(stamp.WEBHOOKS) != seen.get(stamp.WEBHOOKS):
            app[DISPATCHER].round_now.set()
        seen.update(now)

    app[WATCHER] = StampWatcher(config.direct_url, refresh)
    app.cleanup_ctx.append(_dispatcher_ctx)
    supervisor = supervisor_of(app)
    app.cleanup_ctx.append(supervisor.task("change-stamps", lambda a: a[WATCHER].run()))
    app.cleanup_ctx.append(supervisor.task("dispatcher", lambda a: a[DISPATCHER].run()))
    add_ops_routes(app, app[METRICS].registry, readiness(app, supervisor))
    return app


def readiness(app: web.Application, supervisor: Supervisor) -> Readiness:
    """Ready when PostgreSQL answers, no task is down, and the scheduling rounds run."""
    ready = service_readiness(app[CONFIG], lambda: app.get(POOL), supervisor, failing=failing_of(app), broker=False)

    async def rounds() -> tuple[bool, str]:
        if DISPATCHER not in app:
            return False, "starting"
        why = app[DISPATCHER].stalled(ROUND_STALL_S)
        return (False, why) if why else (True, "ok")

    ready.add("dispatching", rounds)
    ready.add("change-stamps", lambda: _stamps(app))
    return ready


async def _stamps(app: web.Application) -> tuple[bool, str]:
    ok, why = app[WATCHER].status()
    # Polling still wakes the workers (within 0.5 s): a listener down slows them, it does not stop them.
    return True, ("ok" if ok else f"degraded: {why}")


async def serve(config: WebhooksConfig) -> None:
    await run_app(create_app(config), config, name="dispatcher", port=None, admin_port=config.webhooks_admin_port)
