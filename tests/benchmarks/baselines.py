"""The physical-limit baselines that run as their own processes, like the product does.

``python -m tests.benchmarks.baselines http --port P --body FILE``
    a bare aiohttp handler answering every GET with the same bytes (and content type) the
    product answered, no auth, no database.
``python -m tests.benchmarks.baselines floor --port P --body FILE --headers FILE --key KEY``
    the floor of any implementation on aiohttp: the bare handler plus only what every counted
    200 must carry, done the cheapest way, with no gate, limit, database or cache behind it: the
    key looked up in a dict, the product's response headers (FILE: its JSON list of pairs) with
    the per-request ones (remaining counts, ``RateLimit``, resets, request id) formatted for
    each request, and one access-log line per request (JSON, written in batches every 50 ms to
    /dev/null; the product writes its lines to a file). What the product does beyond this (the
    gates, the exact cross-process admission, the page cache, compression and conditional
    requests, the listener's guards, metrics) can only cost more.
``python -m tests.benchmarks.baselines broadcast --port P``
    a bare aiohttp WebSocket server on ``/stream``; ``POST /publish`` with a body of
    newline-separated, pre-encoded messages sends each one to every connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import time

import orjson
from aiohttp import WSMsgType, web
from multidict import CIMultiDict

from .common import raise_nofile


def any_get_app(handler) -> web.Application:
    """``handler`` for every GET, and a ``/readyz`` for the harness to wait on."""

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/readyz", ready)
    app.router.add_get("/{tail:.*}", handler)
    return app


def http_app(body: bytes) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "private, no-cache"})

    return any_get_app(handler)


#: The product's response headers that change from request to request; the floor formats them
#: for each request. The framework writes Content-Length, Date and Server itself.
PER_REQUEST = {
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-quota-remaining",
    "x-quota-reset",
    "ratelimit",
    "x-request-id",
}
FRAMEWORK = {"content-length", "date", "server", "connection", "keep-alive"}


def floor_app(body: bytes, headers: list[tuple[str, str]], key: str, access_log: bool = True) -> web.Application:
    fixed = [(k, v) for k, v in headers if k.lower() not in PER_REQUEST | FRAMEWORK]
    given = dict((k.lower(), v) for k, v in headers)
    rate_limit, quota = int(given["x-ratelimit-limit"]), int(given["x-quota-limit"])
    workspaces = {f"Bearer {key}": "ws_bench"}
    used = [0, 0]
    ids = itertools.count(1)
    pending: list[bytes] = []
    sink = os.open(os.devnull, os.O_WRONLY)

    def flush() -> None:
        os.write(sink, b"".join(pending))
        pending.clear()

    async def handler(request: web.Request) -> web.Response:
        started = time.perf_counter()
        workspace = workspaces.get(request.headers.get("Authorization", ""))
        if workspace is None:
            return web.Response(
                status=401, body=b'{"error":{"code":"NOT_AUTHENTICATED"}}', content_type="application/json"
            )
        used[0] += 1
        used[1] += 1
        now = time.time()
        minute_reset, day_reset = int(now // 60 * 60 + 60), int(now // 86400 * 86400 + 86400)
        minute_left, day_left = rate_limit - used[0], quota - used[1]
        rid = f"req_0123456789ab{next(ids):012x}"
        h = CIMultiDict(fixed)
        h.extend(
            (
                ("X-RateLimit-Remaining", str(minute_left)),
                ("X-RateLimit-Reset", str(minute_reset)),
                ("X-Quota-Remaining", str(day_left)),
                ("X-Quota-Reset", str(day_reset)),
                (
                    "RateLimit",
                    f'"minute";r={minute_left};t={max(1, int(minute_reset - now))}, "day";r={day_left};t={max(1, int(day_reset - now))}',
                ),
                ("X-Request-Id", rid),
            )
        )
        response = web.Response(body=body, headers=h)
        if not access_log:
            return response
        if not pending:
            asyncio.get_running_loop().call_later(0.05, flush)
        pending.append(
            orjson.dumps(
                {
                    "ts": now,
                    "level": "info",
                    "service": "floor",
                    "logger": "tickerwire.access",
                    "msg": f"GET {request.path} 200",
                    "request_id": rid,
                    "method": "GET",
                    "route": request.path,
                    "status": 200,
                    "duration_ms": int((time.perf_counter() - started) * 100_000 + 0.5) / 100,
                    "workspace_id": workspace,
                }
            )
            + b"\n"
        )
        return response

    return any_get_app(handler)


CONNECTIONS = web.AppKey("connections", set)


def broadcast_app() -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[CONNECTIONS] = set()

    async def stream(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=False, autoping=True)
        await ws.prepare(request)
        app[CONNECTIONS].add(ws)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.ERROR:
                    break
        finally:
            app[CONNECTIONS].discard(ws)
        return ws

    async def publish(request: web.Request) -> web.Response:
        messages = (await request.read()).split(b"\n")
        sent = 0
        for message in messages:
            for ws in list(app[CONNECTIONS]):
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.send_frame(message, WSMsgType.TEXT)
                    sent += 1
        return web.json_response({"sent": sent})

    async def ready(request: web.Request) -> web.Response:
        return web.json_response({"connections": len(app[CONNECTIONS])})

    app.router.add_get("/stream", stream)
    app.router.add_post("/publish", publish)
    app.router.add_get("/readyz", ready)
    return app


def otlp_sink_app() -> web.Application:
    """An OTLP/HTTP trace receiver that reads each export and discards it (the tracing benchmark's
    backend: what sending spans costs the product, not what storing them costs a backend)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    received = {"exports": 0, "bytes": 0}

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        received["exports"] += 1
        received["bytes"] += len(body)
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def ready(request: web.Request) -> web.Response:
        return web.json_response(received)

    app.router.add_post("/v1/traces", traces)
    app.router.add_get("/readyz", ready)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["http", "floor", "broadcast", "otlp"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body")
    parser.add_argument("--headers")
    parser.add_argument("--key")
    parser.add_argument("--no-access-log", action="store_true", help="floor: without the access-log line")
    args = parser.parse_args()
    raise_nofile()
    if args.kind == "http":
        with open(args.body, "rb") as fh:
            app = http_app(fh.read())
    elif args.kind == "floor":
        with open(args.body, "rb") as fh, open(args.headers) as hh:
            app = floor_app(fh.read(), [tuple(pair) for pair in json.load(hh)], args.key, not args.no_access_log)
    elif args.kind == "otlp":
        app = otlp_sink_app()
    else:
        app = broadcast_app()
    try:  # the same event loop the product's processes use, so the comparison stays fair
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
