"""The admin listener: its operator endpoints (/healthz, /readyz, /metrics), and running a
process's listeners.

Every process has an admin listener (``TICKERWIRE_<SERVICE>_ADMIN_PORT`` on
``TICKERWIRE_ADMIN_HOST``, localhost by default); the api and the stream also have their
partner listener, which serves only the partner API or stream: operator paths there are 404.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from ..http.envelope import Routes, error_middleware
from ..http.listener import ConnectionLimits, Guard, GuardedRunner, ListenerMetrics, server_header
from ..runtime.config import Config
from ..runtime.supervise import SUPERVISOR

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], Awaitable[tuple[bool, "str | dict[str, dict]"]]]

#: /readyz answers within this, whatever a check is waiting for.
READY_TIMEOUT_S = 1.0


async def answer_ready(ready: ReadyCheck) -> tuple[bool, "str | dict[str, dict]"]:
    """Run a readiness check within :data:`READY_TIMEOUT_S`; unsure means not ready."""
    try:
        return await asyncio.wait_for(ready(), READY_TIMEOUT_S)
    except asyncio.TimeoutError:
        return False, f"no answer within {READY_TIMEOUT_S:g}s"
    except Exception as exc:  # readiness must answer, whatever failed
        return False, f"{type(exc).__name__}"


def readiness_response(ok: bool, detail: "str | dict[str, dict]") -> web.Response:
    """200 ``{"status": "ready"}`` or 503 ``{"status": "not_ready", "detail": reason}``;
    with named checks, ``checks`` holds each one's detail and ``detail`` the failing ones."""
    body: dict = {"status": "ready" if ok else "not_ready"}
    if isinstance(detail, dict):
        body["checks"] = detail
        failing = [f"{name}: {c['detail']}" for name, c in detail.items() if not c["ok"]]
        body["detail"] = "; ".join(failing) if failing else ("ok" if ok else "not ready")
    else:
        body["detail"] = detail
    return web.json_response(body, status=200 if ok else 503)


#: The media type of a scraper that reads OpenMetrics (Prometheus sends it first in its Accept).
OPENMETRICS = "application/openmetrics-text"

#: The admin application of a process, attached to its main application.
ADMIN_APP = web.AppKey("admin_app", web.Application)
REGISTRY = web.AppKey("registry", CollectorRegistry)

#: Connections the admin listener keeps at most (scrapers and probes on localhost).
ADMIN_MAX_CONNECTIONS = 64
#: File descriptors a process needs besides its connections and its database pool: the
#: listening sockets, Kafka connections, the event loop, logs. deploy/README.md has the budget.
FD_RESERVE = 64


ADMIN_ROUTES = Routes(
    not_found="No such operator endpoint; this listener serves /healthz, /readyz and /metrics.",
    method_not_allowed="The operator endpoints accept only GET and HEAD.",
    allow="GET, HEAD",
)


def add_ops_routes(app: web.Application, registry: CollectorRegistry, ready: ReadyCheck) -> None:
    """Build the admin application serving the operator endpoints of ``app``'s process and
    attach it as ``app[ADMIN_APP]``; :func:`run_app` serves it on the admin listener."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        return readiness_response(*await answer_ready(ready))

    async def metrics(request: web.Request) -> web.Response:
        # OpenMetrics (which carries the histograms' trace exemplars) when the scraper asks for it.
        if OPENMETRICS in request.headers.get("Accept", ""):
            body = openmetrics.generate_latest(registry)
            return web.Response(body=body, headers={"Content-Type": openmetrics.CONTENT_TYPE_LATEST})
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # The one envelope here too: an unknown path, a wrong method, a body (none is read).
    admin = web.Application(middlewares=[error_middleware(ADMIN_ROUTES, max_body=0)])
    admin[REGISTRY] = registry
    admin.router.add_get("/healthz", healthz)
    admin.router.add_get("/readyz", readyz)
    admin.router.add_get("/metrics", metrics)
    app[ADMIN_APP] = admin


def connection_budget(max_connections: int, db_pool_max: int, fd_limit: int) -> int:
    """How many partner connections fit in ``fd_limit`` file descriptors (at least 1)."""
    room = fd_limit - ADMIN_MAX_CONNECTIONS - db_pool_max - FD_RESERVE
    return max(1, min(max_connections, room))


def _fit_fd_limit(config: Config, name: str) -> int:
    """Raise the soft file-descriptor limit towards the budget; if the hard limit is too low,
    serve fewer connections than configured, loudly."""
    need = config.max_connections + ADMIN_MAX_CONNECTIONS + config.db_pool_max + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return config.max_connections
    allowed = connection_budget(config.max_connections, config.db_pool_max, soft)
    if allowed < config.max_connections:
        log.warning(
            "%s: the file-descriptor limit %d is below the budget %d of TICKERWIRE_MAX_CONNECTIONS=%d; "
            "serving at most %d connections. Raise LimitNOFILE (see deploy/README.md) or lower the setting.",
            name,
            soft,
            need,
            config.max_connections,
            allowed,
        )
    return allowed


async def _start(
    app: web.Application, guard: Guard, host: str, port: int, name: str, *, share: bool = False
) -> GuardedRunner:
    """``share``: other processes of this service listen on the same port (SO_REUSEPORT)."""
    app.on_response_prepare.append(server_header)
    runner = GuardedRunner(app, guard)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, reuse_port=share or None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise SystemExit(f"{name}: cannot listen on {host}:{port}: {exc.strerror}") from None
    bound = next((address[1] for address in runner.addresses if isinstance(address, tuple)), port)
    log.info("%s listening on http://%s:%d", name, host, bound)  # the port taken, when 0 asked for any
    return runner


async def run_app(app: web.Application, config: Config, *, name: str, port: int | None, admin_port: int) -> None:
    """Serve ``app`` on ``port`` (None: run its start-up and background tasks, serve nothing)
    and its admin application on ``admin_port``, until cancelled. The admin listener starts
    first, so /healthz answers and /readyz says why not ready while the process starts."""
    registry = app[ADMIN_APP][REGISTRY]
    metrics = ListenerMetrics(registry)
    # Only a process with a partner listener needs the connection budget in its fd limit.
    max_connections = _fit_fd_limit(config, name) if port is not None else config.max_connections
    partner = Guard(
        "partner",
        ConnectionLimits(max_connections, config.http_header_timeout_s, config.http_keepalive_timeout_s),
        metrics,
    )
    admin = Guard(
        "admin",
        ConnectionLimits(ADMIN_MAX_CONNECTIONS, config.http_header_timeout_s, config.http_keepalive_timeout_s),
        metrics,
    )
    runners = [await _start(app[ADMIN_APP], admin, config.admin_host, admin_port, f"{name} admin")]
    try:
        if port is None:
            runner = GuardedRunner(app, partner)
            runners.append(runner)
            await runner.setup()
        else:
            runners.append(await _start(app, partner, config.host, port, name, share=config.port_sharing))
        supervisor = app.get(SUPERVISOR)
        if supervisor is None:
            await asyncio.Event().wait()  # nothing supervised: serve until cancelled
        else:
            await supervisor.fatal.wait()  # a background task died for good: exit non-zero
            raise SystemExit(f"{name}: {supervisor.fatal_reason}")
    finally:
        for runner in reversed(runners):
            await runner.cleanup()
