"""Operator endpoints every process serves outside the partner path: /healthz, /readyz, /metrics."""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], Awaitable[tuple[bool, str]]]


def add_ops_routes(app: web.Application, registry: CollectorRegistry, ready: ReadyCheck) -> None:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        try:
            ok, detail = await ready()
        except Exception as exc:  # readiness must answer, whatever failed
            ok, detail = False, f"{type(exc).__name__}"
        return web.json_response({"status": "ready" if ok else "not_ready", "detail": detail}, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)


async def run_app(app: web.Application, host: str, port: int, *, name: str) -> None:
    """Serve ``app`` until cancelled (SIGTERM/SIGINT handled by the caller's runner)."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise SystemExit(f"{name}: cannot listen on {host}:{port}: {exc.strerror}") from None
    log.info("%s listening on http://%s:%d", name, host, port)
    try:
        import asyncio

        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
