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

from ..common import kafka
from ..common.config import Config
from ..common.db import create_pool, migrate, storage_errors
from ..common.ops import add_ops_routes, run_app
from ..common.retry import retry_transient
from ..common.tasks import background_task
from .metrics import ProjectorMetrics
from .runner import Projector, ensure_topics_with_retry
from .sweeper import run_sweeper

log = logging.getLogger(__name__)

CONFIG = web.AppKey("config", Config)
METRICS = web.AppKey("metrics", ProjectorMetrics)
POOL = web.AppKey("pool", asyncpg.Pool)
PROJECTOR = web.AppKey("projector", Projector)


async def _pool_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]

    async def connect_and_migrate() -> asyncpg.Pool:
        pool = await create_pool(config.database_url, config.read_model_schema, min_size=2, max_size=config.db_pool_max)
        with storage_errors("migrate"):
            async with pool.acquire() as conn:
                await migrate(conn, config.read_model_schema)
        return pool

    app[POOL] = await retry_transient(connect_and_migrate, what="connect to PostgreSQL", cap=2.0)
    yield
    await app[POOL].close()


async def _consume(app: web.Application) -> None:
    await ensure_topics_with_retry(app[CONFIG])
    await app[PROJECTOR].run()


def create_app(config: Config, metrics: ProjectorMetrics | None = None) -> web.Application:
    app = web.Application()
    app[CONFIG] = config
    app[METRICS] = metrics or ProjectorMetrics()
    app.cleanup_ctx.append(_pool_ctx)

    async def projector_ctx(app: web.Application) -> AsyncIterator[None]:
        app[PROJECTOR] = Projector(config, app[POOL], app[METRICS])
        yield

    app.cleanup_ctx.append(projector_ctx)
    app.cleanup_ctx.append(background_task("consume", _consume))
    app.cleanup_ctx.append(background_task("sweeper", lambda a: run_sweeper(a[POOL], config.sweep_interval_s, a[METRICS])))

    async def ready() -> tuple[bool, str]:
        if POOL not in app or PROJECTOR not in app:
            return False, "starting"
        return (True, "caught up") if app[PROJECTOR].caught_up.is_set() else (False, "catching up")

    add_ops_routes(app, app[METRICS].registry, ready)
    return app


async def serve(config: Config) -> None:
    await kafka.require_safe_topics(config, create=True)
    await run_app(create_app(config), config, name="projector", port=None, admin_port=config.projector_admin_port)
