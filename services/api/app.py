"""The read API process: ``create_app(config)`` builds the aiohttp application.

Partner routes live under ``config.base_path``; operator routes (/healthz, /readyz,
/metrics) are on the process's admin listener (``app[ADMIN_APP]``), never on the partner
port. The pool lives in ``cleanup_ctx``; the change-stamp watcher (which refreshes the catalog,
the principals and the page cache) and the admission batcher run as supervised tasks.
"""

from __future__ import annotations

from typing import AsyncIterator

from aiohttp import web

from tickerwire.schemas.topics import POSTS, topic_name

from ..common.db import reader_pool
from ..common.db.replicas import Replicas
from ..common.operator.admin_listener import add_ops_routes, run_app
from ..common.operator.app_tracing import install_tracing
from ..common.operator.readiness import Readiness, failing_of, service_readiness
from ..common.runtime.supervise import Supervisor, supervisor_of
from ..readmodel import logposition, positions, stamps as stamp
from ..readmodel.access import Principals
from ..readmodel.stamps import StampWatcher
from . import endpoint_writes as writes, handlers, openapi, webhook_test
from .admission import Admissions
from .catalog import Catalog
from .compression import Compressed
from .console_routes import add_console_routes
from .docs import add_docs_routes
from .errors import routes
from .gates import PARTNER
from .metrics import ApiMetrics
from .pages import PageCache
from .params import Listings
from .pipeline import request_middleware
from .publisher import Publisher
from .server_spans import server_spans
from .settings import ApiConfig
from .state import (
    ADMISSIONS,
    CATALOG,
    COMPRESSED,
    CONFIG,
    LISTINGS,
    METRICS,
    PAGES,
    POOL,
    PRINCIPALS,
    PUBLISHER,
    REPLICAS,
    SEARCHES,
    WATCHER,
)


def add_partner_routes(app: web.Application, base: str) -> None:
    routes = [
        ("/posts", handlers.list_posts, "posts"),
        ("/posts/{id_or_slug}", handlers.post_detail, "post"),
        ("/categories", handlers.list_categories, "categories"),
        ("/categories/{slug}", handlers.category, "category"),
        ("/tokens", handlers.list_tokens, "tokens"),
        ("/tokens/{ticker}", handlers.token, "token"),
        ("/sentiment-pulse", handlers.sentiment_pulse, "sentiment_pulse"),
        ("/languages", handlers.list_languages, "languages"),
        ("/search", handlers.search, "search"),
        ("/changes", handlers.changes, "changes"),
        ("/webhooks/endpoints", handlers.list_webhook_endpoints, "webhook_endpoints"),
        ("/webhooks/endpoints/{id}", handlers.webhook_endpoint, "webhook_endpoint"),
        ("/webhooks/endpoints/{id}/attempts", handlers.webhook_attempts, "webhook_attempts"),
    ]
    for path, handler, name in routes:
        app.router.add_get(base + path, handler, name=PARTNER + name)
    app.router.add_post(
        base + "/webhooks/endpoints/{id}/test", webhook_test.send_webhook_test, name=PARTNER + "webhook_test"
    )
    # The partner's changes of its webhook endpoints (docs/api.md#managing-endpoints).
    one = base + "/webhooks/endpoints/{id}"
    app.router.add_post(base + "/webhooks/endpoints", writes.create_endpoint, name=PARTNER + "create_webhook_endpoint")
    app.router.add_patch(one, writes.update_endpoint, name=PARTNER + "update_webhook_endpoint")
    app.router.add_delete(one, writes.status_change("remove"), name=PARTNER + "delete_webhook_endpoint")
    for action in ("pause", "resume"):
        app.router.add_post(f"{one}/{action}", writes.status_change(action), name=f"{PARTNER}{action}_webhook_endpoint")
    app.router.add_post(one + "/rotate-secret", writes.rotate_secret, name=PARTNER + "rotate_webhook_endpoint_secret")
    app.router.add_post(one + "/replay", writes.replay_endpoint, name=PARTNER + "replay_webhook_endpoint")
    # The contract is public: no key, and (outside the partner routes) no rate limit or quota.
    app.router.add_get(base + "/openapi.json", openapi.handler(base), name="openapi")
    add_docs_routes(app, base)
    add_console_routes(app, base, app[CONFIG].console_stream_url)


async def _pool_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    app[POOL] = await reader_pool(config, failing_of(app))
    yield
    await app[POOL].close()


async def _publisher_ctx(app: web.Application) -> AsyncIterator[None]:
    """The producer of the endpoint changes: started on the first one, stopped here."""
    yield
    await app[PUBLISHER].close()


async def _refresh(app: web.Application) -> None:
    """Everything the process holds in memory, brought up to the change stamps (one query when
    nothing moved): the catalog bodies, the page cache's generation, then the principals."""
    catalog, principals = app[CATALOG], app[PRINCIPALS]
    # With replicas, what moved is reloaded from one that has replayed the stamps (else the primary).
    source = await catalog.refresh(app[POOL], app[REPLICAS], principals.stamp)
    app[PAGES].observe(catalog.stamps)
    await app[COMPRESSED].warm(catalog.tokens.listing.etag, catalog.tokens.listing.data)  # once per tokens stamp
    if await principals.refresh(source, catalog.stamps.get(stamp.ACCESS)):
        app[ADMISSIONS].forget_exhaustion()  # a workspace's limits may have changed


def create_app(config: ApiConfig, metrics: ApiMetrics | None = None) -> web.Application:
    compressed = Compressed()
    metrics = metrics or ApiMetrics()
    app = web.Application(
        middlewares=[request_middleware(routes(config.base_path), compressed, metrics.requests, config.max_body_bytes)],
        client_max_size=config.max_body_bytes,
        # Long (percent-encoded) query strings reach the app and get a JSON 422, not the
        # protocol layer's plain-text 400; see params.py for the per-parameter limits.
        handler_args={"max_line_size": 131_072},
    )
    app[CONFIG] = config
    app[COMPRESSED] = compressed
    app[PAGES] = pages = PageCache()
    app[LISTINGS] = Listings()
    app[SEARCHES] = Listings(searching=True)
    app[METRICS] = metrics
    tracing = install_tracing(app, "tickerwire-api", metrics.registry)
    if tracing.enabled:  # off: no layer, no cost per request
        app.middlewares.insert(0, server_spans(tracing))
    metrics.count_page_cache(pages.counts)
    app[CATALOG] = Catalog(log_topic=topic_name(config.topic_prefix, POSTS))
    app[PRINCIPALS] = principals = Principals(
        on_fallback=metrics.access_fallbacks.inc, acquire_timeout_s=config.db_acquire_timeout_s
    )
    app[WATCHER] = principals.follow(
        StampWatcher(config.direct_url, lambda: _refresh(app), on_listening=lambda up: metrics.listener_up.set(int(up)))
    )
    metrics.principals.set_function(lambda: len(principals.by_hash))
    metrics.access_stamp.set_function(lambda: -1 if principals.stamp is None else principals.stamp)
    app[ADMISSIONS] = Admissions(
        config.direct_url,
        default_rate=config.default_rate_limit_per_minute,
        default_quota=config.default_daily_quota,
        metrics=metrics,
        timeout_s=config.db_statement_timeout_s,  # a request waits no longer than any other statement
    )
    app[REPLICAS] = Replicas(
        config,
        app[CATALOG].log_topic,
        positions_sql=positions.marks_array_sql("$1"),
        covers=logposition.covers,
        leave_after_s=config.replica_max_lag_s,
        rejoin_below_s=config.replica_max_lag_s / 4,
        registry=metrics.registry,
    )
    app[PUBLISHER] = Publisher(config, tracing)
    app.cleanup_ctx.append(_pool_ctx)
    app.cleanup_ctx.append(_publisher_ctx)
    supervisor = supervisor_of(app)
    if app[REPLICAS]:
        app.cleanup_ctx.append(supervisor.task("replicas", lambda a: a[REPLICAS].run(a[POOL])))
    app.cleanup_ctx.append(supervisor.task("change-stamps", lambda a: a[WATCHER].run()))
    app.cleanup_ctx.append(supervisor.task("admission", lambda a: a[ADMISSIONS].run()))
    add_partner_routes(app, config.base_path)
    add_ops_routes(app, app[METRICS].registry, readiness(app, supervisor))
    return app


def readiness(app: web.Application, supervisor: Supervisor) -> Readiness:
    """Ready when PostgreSQL answers, the read model is migrated, the in-memory copies (the
    catalog, the principals, the page cache's generation: one refresh brings them all up to the
    change stamps) are confirmed current with their listener up, and admission has a connection."""
    ready = service_readiness(app[CONFIG], lambda: app.get(POOL), supervisor, failing=failing_of(app), broker=False)

    async def copies() -> tuple[bool, str]:
        if not app[PRINCIPALS].loaded:
            return False, "principals not loaded yet"
        return app[WATCHER].status()

    async def admission() -> tuple[bool, str]:
        return (True, "ok") if app[ADMISSIONS].connected else (False, "admission connections down")

    async def replicas() -> tuple[bool, str]:
        return app[REPLICAS].check()

    ready.add("change-stamps", copies)
    ready.add("admission", admission)
    if app[REPLICAS]:
        ready.add("replicas", replicas)
    return ready


async def serve(config: ApiConfig) -> None:
    await run_app(create_app(config), config, name="api", port=config.api_port, admin_port=config.api_admin_port)
