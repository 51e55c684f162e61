"""The physical-limit baselines that run as their own processes, like the product does.

``python -m tests.benchmarks.baselines http --port P --body FILE``
    a bare aiohttp handler answering every GET with the same bytes (and content type) the
    product answered, no auth, no database.
``python -m tests.benchmarks.baselines broadcast --port P``
    a bare aiohttp WebSocket server on ``/stream``; ``POST /publish`` with a body of
    newline-separated, pre-encoded messages sends each one to every connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from aiohttp import WSMsgType, web

from .common import raise_nofile


def http_app(body: bytes) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "private, no-cache"})

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/readyz", ready)
    app.router.add_get("/{tail:.*}", handler)
    return app


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["http", "broadcast"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body")
    args = parser.parse_args()
    raise_nofile()
    if args.kind == "http":
        with open(args.body, "rb") as fh:
            app = http_app(fh.read())
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
