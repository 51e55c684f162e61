"""Operator endpoints every process serves outside the partner path: /healthz, /readyz, /metrics."""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
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


_LOW_LEVEL_CODES = {413: "PAYLOAD_TOO_LARGE", 414: "URI_TOO_LONG", 431: "HEADERS_TOO_LARGE"}


class _JsonErrorHandler(RequestHandler):
    """Requests aiohttp cannot even parse (bad request line, NUL in a header, oversized
    lines) are answered before any middleware runs; answer them with the JSON error
    envelope too, instead of aiohttp's plain-text page."""

    def handle_error(self, request, status=500, exc=None, message=None):  # type: ignore[override]
        super().handle_error(request, status, exc, message)  # logs, and refuses once output started
        if status >= 500:
            code, text = "INTERNAL", "An internal error occurred; it has been logged."
        else:
            code, text = _LOW_LEVEL_CODES.get(status, "VALIDATION_FAILED"), "The HTTP request could not be parsed."
        response = web.Response(
            status=status, body=orjson.dumps({"error": {"code": code, "message": text}}), content_type="application/json"
        )
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class _Runner(web.AppRunner):
    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _JsonErrorServer  # same object, JSON error pages
        return server


async def run_app(app: web.Application, host: str, port: int, *, name: str) -> None:
    """Serve ``app`` until cancelled (SIGTERM/SIGINT handled by the caller's runner)."""
    runner = _Runner(app, handle_signals=False, access_log=None)
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
