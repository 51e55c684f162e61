"""The stream process: ``create_app(config)`` builds the aiohttp application serving
``{base_path}/stream`` (WebSocket, handled by :mod:`.endpoint`); the operator routes are on its
admin listener. Here: what runs beside the handler (the feed, the leases, the pinger, the access
watchdog, the replicas), the state they share (:mod:`.state`), and when the process is ready.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from aiohttp import web

from tickerwire.schemas.topics import POSTS, topic_name

from ..common.db import reader_pool
from ..common.http.requestlog import add_request_log
from ..common.kafka.topicgate import TOPIC_GATE, TopicGate, install
from ..common.kafka.watch import watch_broker
from ..common.operator.admin_listener import add_ops_routes, run_app
from ..common.operator.app_tracing import TRACING, install_tracing
from ..common.operator.readiness import Readiness, failing_of, service_readiness
from ..common.runtime.supervise import Supervisor, supervisor_of
from ..readmodel.access import Principals
from ..readmodel.stamps import StampWatcher
from . import protocol
from .endpoint import stream
from .errors import error_envelope
from .feed import Feed
from .hub import Hub
from .leases import Leases
from .metrics import StreamMetrics
from .replicated import replicated, stream_replicas
from .settings import StreamConfig
from .state import CONFIG, FEED, HUB, LEASES, METRICS, POOL, PRINCIPALS, REPLICAS, WATCHER
from .watchdog import recheck, run_watchdog


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
    app[FEED] = Feed(
        config,
        app[POOL],
        app[HUB],
        app[METRICS],
        # read-your-stream through the API's replicas (replicated.py)
        before_announce=(lambda records: replicated(app[REPLICAS], records)) if app[REPLICAS] else None,
        tracing=app[TRACING],
    )
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


def create_app(config: StreamConfig, metrics: StreamMetrics | None = None) -> web.Application:
    app = web.Application(
        middlewares=[error_envelope(config.base_path, max_body=config.max_body_bytes)],
        client_max_size=config.max_body_bytes,
    )
    add_request_log(app)
    app[CONFIG] = config
    app[METRICS] = metrics or StreamMetrics()
    install_tracing(app, "tickerwire-stream", app[METRICS].registry)
    app[HUB] = Hub(app[METRICS], config.stream_queue_size)
    app[PRINCIPALS] = principals = Principals(acquire_timeout_s=config.db_acquire_timeout_s)
    app[WATCHER] = principals.follow(StampWatcher(config.direct_url, lambda: _refresh(app)))
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


async def serve(config: StreamConfig) -> None:
    await run_app(
        create_app(config), config, name="stream", port=config.stream_port, admin_port=config.stream_admin_port
    )
