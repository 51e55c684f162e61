"""The read API process: ``create_app(config)`` builds the aiohttp application.

Partner routes live under ``config.base_path``; operator routes (/healthz, /readyz,
/metrics) are on the process's admin listener (``app[ADMIN_APP]``), never on the partner
port. The pool and the catalog refresher live in ``cleanup_ctx``.
"""

from __future__ import annotations

import time
from typing import AsyncIterator

from aiohttp import web

from tickerwire.schemas.topics import POSTS, topic_name

from ..common.config import Config
from ..common.db import reader_pool
from ..common.ops import add_ops_routes, run_app
from ..common.requestlog import add_request_log
from ..common.readiness import Readiness, service_readiness
from ..common.supervise import Supervisor, supervisor_of
from . import handlers, openapi
from .docs import add_docs_routes
from .access import PARTNER, access_middleware
from .catalog import Catalog
from .conditional import conditional_middleware
from .errors import error_middleware
from .metrics import ApiMetrics
from .state import CATALOG, CONFIG, METRICS, POOL

def metrics_middleware():
    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        started = time.perf_counter()
        response = await handler(request)
        route = request.match_info.route.name or "unmatched"
        metrics = request.app[METRICS]
        metrics.requests.labels(route, str(response.status)).inc()
        metrics.latency.labels(route).observe(time.perf_counter() - started)
        return response

    return middleware


def add_partner_routes(app: web.Application, base: str) -> None:
    routes = [
        ("/posts", handlers.list_posts, "posts"),
        ("/posts/{id_or_slug}", handlers.post_detail, "post"),
        ("/categories", handlers.categories, "categories"),
        ("/categories/{slug}", handlers.category, "category"),
        ("/tokens", handlers.tokens, "tokens"),
        ("/tokens/{ticker}", handlers.token, "token"),
        ("/sentiment-pulse", handlers.sentiment_pulse, "sentiment_pulse"),
        ("/languages", handlers.languages, "languages"),
        ("/search", handlers.search, "search"),
    ]
    for path, handler, name in routes:
        app.router.add_get(base + path, handler, name=PARTNER + name)
    # The contract is public: no key, and (outside the partner routes) no rate limit or quota.
    app.router.add_get(base + "/openapi.json", openapi.handler(base), name="openapi")
    add_docs_routes(app, base)


async def _pool_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    app[POOL] = await reader_pool(config)
    yield
    await app[POOL].close()


def create_app(config: Config, metrics: ApiMetrics | None = None) -> web.Application:
    app = web.Application(
        # The access middleware wraps the conditional one, so a 304 carries the pacing headers too.
        middlewares=[metrics_middleware(), error_middleware(config.base_path), access_middleware(), conditional_middleware()],
        client_max_size=config.max_body_bytes,
        # Long (percent-encoded) query strings reach the app and get a JSON 422, not the
        # protocol layer's plain-text 400; see params.py for the per-parameter limits.
        handler_args={"max_line_size": 131_072},
    )
    add_request_log(app)
    app[CONFIG] = config
    app[METRICS] = metrics or ApiMetrics()
    app[CATALOG] = Catalog(log_topic=topic_name(config.topic_prefix, POSTS))
    app.cleanup_ctx.append(_pool_ctx)
    supervisor = supervisor_of(app)
    app.cleanup_ctx.append(supervisor.task("catalog", lambda a: a[CATALOG].run(a[POOL])))
    add_partner_routes(app, config.base_path)
    add_ops_routes(app, app[METRICS].registry, readiness(app, supervisor))
    return app


def readiness(app: web.Application, supervisor: Supervisor) -> Readiness:
    """Ready when PostgreSQL answers, the read model is migrated and the cached catalog is fresh."""
    config = app[CONFIG]
    ready = service_readiness(config, lambda: app.get(POOL), supervisor, broker=False)

    async def catalog() -> tuple[bool, str]:
        return app[CATALOG].check(config.api_catalog_max_age_s)

    ready.add("catalog", catalog)
    return ready


async def serve(config: Config) -> None:
    await run_app(create_app(config), config, name="api", port=config.api_port, admin_port=config.api_admin_port)
