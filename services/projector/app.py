"""The projector process: the only writer of the read model.

``create_app(config)`` returns an aiohttp application (no partner routes; its operator
endpoints are served on the admin listener);
the database pool, the consume loop and the badge sweeper live in its ``cleanup_ctx``.
"""

from __future__ import annotations

import logging
from typing import AsyncIterator

import asyncpg
from aiohttp import web

from ..common.db import connect, create_pool, retry_connect, storage_errors
from ..common.kafka.topicgate import TOPIC_GATE, TopicGate, install
from ..common.kafka.watch import watch_broker
from ..common.operator.admin_listener import add_ops_routes, run_app
from ..common.operator.app_tracing import install_tracing
from ..common.operator.readiness import Readiness, failing_of, service_readiness
from ..common.runtime.supervise import Supervisor, supervisor_of
from ..readmodel.migrate import migrate
from .metrics import ProjectorMetrics
from .runner import Projector, ensure_topics_with_retry
from .settings import ProjectorConfig
from .sweeper import run_sweeper

log = logging.getLogger(__name__)

CONFIG = web.AppKey("config", ProjectorConfig)
METRICS = web.AppKey("metrics", ProjectorMetrics)
POOL = web.AppKey("pool", asyncpg.Pool)
PROJECTOR = web.AppKey("projector", Projector)
#: Bound of the start-up migration's statements, as on the pool's connections (create_pool's default).
MIGRATE_TIMEOUT_S = 30.0


async def _pool_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]

    async def connect_and_migrate() -> asyncpg.Pool:
        # A batch's rows and its log positions commit together, and (synchronous_commit on,
        # the default) become visible only once flushed, on the synchronous standby too where
        # one is configured: what the stream pushes and every cursor it hands out survive a
        # crash of PostgreSQL and a failover (docs/api.md#durability).
        if config.pooled:  # migrations bypass a transaction-mode pooler (docs/operations.md, PgBouncer)
            with storage_errors("migrate"):
                async with connect(
                    config.direct_url,
                    schema=config.read_model_schema,
                    settings={"statement_timeout": str(int(MIGRATE_TIMEOUT_S * 1000))},
                    command_timeout=MIGRATE_TIMEOUT_S,
                    what="migrate",
                ) as conn:
                    await migrate(conn, config.read_model_schema)
        pool = await create_pool(
            config.database_url,
            config.read_model_schema,
            min_size=config.db_pool_min,
            max_size=config.db_pool_max,
            connect_timeout_s=config.db_connect_timeout_s,
            stateless=True,
            synchronous_commit=config.projector_synchronous_commit,
            pooled=config.pooled,
        )
        if config.pooled:
            return pool
        with storage_errors("migrate"):
            async with pool.acquire() as conn:
                await migrate(conn, config.read_model_schema)
        return pool

    app[POOL] = await retry_connect(connect_and_migrate, failing=failing_of(app))
    yield
    await app[POOL].close()


async def _consume(app: web.Application) -> None:
    await ensure_topics_with_retry(app[CONFIG], failing_of(app))
    await app[PROJECTOR].run()


def create_app(config: ProjectorConfig, metrics: ProjectorMetrics | None = None) -> web.Application:
    app = web.Application()
    app[CONFIG] = config
    app[METRICS] = metrics or ProjectorMetrics()
    tracing = install_tracing(app, "tickerwire-projector", app[METRICS].registry)
    app.cleanup_ctx.append(_pool_ctx)
    install(app, TopicGate(config, app[METRICS].registry, create=True))

    async def projector_ctx(app: web.Application) -> AsyncIterator[None]:
        app[PROJECTOR] = Projector(config, app[POOL], app[METRICS], failing=failing_of(app), tracing=tracing)
        yield
        await app[PROJECTOR].close()  # after the consume task (appended later, cleaned up first)

    app.cleanup_ctx.append(projector_ctx)
    supervisor = supervisor_of(app)
    app.cleanup_ctx.append(supervisor.task("consume", _consume))
    app.cleanup_ctx.append(supervisor.task("broker-watch", lambda a: watch_broker(config, failing_of(a))))
    app.cleanup_ctx.append(
        supervisor.task("sweeper", lambda a: run_sweeper(a[POOL], config.sweep_interval_s, a[METRICS]))
    )
    add_ops_routes(app, app[METRICS].registry, readiness(app, supervisor))
    return app


#: The consume loop returns to fetch at least every 0.5 s; this much silence means it is stuck
#: (e.g. retrying a batch while PostgreSQL is down).
CONSUME_STALL_S = 10.0


def readiness(app: web.Application, supervisor: Supervisor) -> Readiness:
    """Ready when PostgreSQL and the broker answer, the consume loop is fetching, it has caught
    up once since start, and no partition is stopped by a log discontinuity."""
    ready = service_readiness(app[CONFIG], lambda: app.get(POOL), supervisor, failing=failing_of(app), broker=True)

    async def consuming() -> tuple[bool, str]:
        if PROJECTOR not in app:
            return False, "starting"
        return app[PROJECTOR].consuming(CONSUME_STALL_S)

    async def log_intact() -> tuple[bool, str]:
        if PROJECTOR not in app or not app[PROJECTOR].stopped:
            return True, "ok"
        return False, "; ".join(gap.reason for gap in app[PROJECTOR].stopped.values())

    ready.add("topics", app[TOPIC_GATE].check)
    ready.add("consuming", consuming)
    ready.add("log", log_intact)
    return ready


async def serve(config: ProjectorConfig) -> None:
    await run_app(create_app(config), config, name="projector", port=None, admin_port=config.projector_admin_port)
