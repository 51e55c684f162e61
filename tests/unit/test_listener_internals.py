"""Pins what the listener (services/common/http/listener.py) takes from aiohttp beyond its public
API, as tests/unit/test_stream_wire.py does for the stream's wire: the private names it reads
(``RequestHandler._request_count``, ``_upgraded``, ``_manager``, ``_loop``; ``web.Server._loop``
and ``_kwargs``; ``AppRunner._make_server``; ``finish_response``'s signature) exist, and, over
loopback with a real aiohttp server, they mean what the listener relies on: ``_request_count``
counts the request heads parsed (a half-sent head is not counted), ``_upgraded`` is set by a
WebSocket upgrade, and a connection whose ``_manager`` was set to None before it was registered
(refused at the connection bound) closes without touching the server.

Checked on the aiohttp versions in ``CHECKED_ON``; an aiohttp upgrade that moves any of it fails
here with a message naming them, so the listener is re-checked before the upgrade ships."""

from __future__ import annotations

import asyncio
import contextlib
import inspect

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CollectorRegistry

from tickerwire.services.common.http.listener import (
    REFUSAL,
    ConnectionLimits,
    Guard,
    GuardedHandler,
    GuardedRunner,
    ListenerMetrics,
)

#: The aiohttp versions the listener's use of aiohttp internals was checked on.
CHECKED_ON = ("3.14.0", "3.14.5")
#: The private attributes of aiohttp's per-connection protocol the listener reads or writes.
HANDLER_PRIVATE = ("_request_count", "_upgraded", "_manager", "_loop")


def checked() -> str:
    return (
        f"installed aiohttp {aiohttp.__version__}; services/common/http/listener.py's use of aiohttp "
        f"internals was checked on aiohttp {', '.join(CHECKED_ON)}: re-check GuardedHandler and "
        "GuardedRunner against this version, then add it to CHECKED_ON"
    )


def slots(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ())}


def test_the_private_names_the_listener_reads_are_there():
    missing = [name for name in HANDLER_PRIVATE if name not in slots(RequestHandler)]
    assert missing == [], f"aiohttp's RequestHandler has no {missing}; {checked()}"
    assert callable(getattr(web.AppRunner, "_make_server", None)), f"AppRunner._make_server is gone; {checked()}"
    finish = list(inspect.signature(RequestHandler.finish_response).parameters)
    assert finish == ["self", "request", "resp", "start_time"], (
        f"RequestHandler.finish_response takes {finish}; {checked()}"
    )
    init = inspect.signature(RequestHandler.__init__).parameters
    assert "manager" in init and "loop" in init, f"RequestHandler() takes {list(init)}; {checked()}"


async def test_a_server_keeps_its_loop_and_handler_arguments():
    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    server = web.Server(handler, keepalive_timeout=7.0)
    assert getattr(server, "_loop", None) is asyncio.get_running_loop(), f"web.Server._loop is gone; {checked()}"
    assert getattr(server, "_kwargs", None) == {"keepalive_timeout": 7.0}, f"web.Server._kwargs changed; {checked()}"


async def test_a_handler_without_a_manager_closes_without_touching_the_server():
    """What a connection refused at the bound relies on (GuardedHandler.connection_made)."""

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    class Spy(web.Server):
        lost: list = []

        def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
            Spy.lost.append(handler)
            super().connection_lost(handler, exc)

    server = Spy(handler)
    refused = RequestHandler(server, loop=asyncio.get_running_loop())
    refused._manager = None
    refused.connection_lost(None)
    assert Spy.lost == [], f"a handler whose _manager is None still reported its loss to the server; {checked()}"
    registered = RequestHandler(server, loop=asyncio.get_running_loop())
    registered.connection_lost(None)
    assert Spy.lost == [registered], f"RequestHandler.connection_lost no longer goes through _manager; {checked()}"


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


async def _until(condition, what: str) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{what}; {checked()}")


async def test_the_internals_mean_what_the_listener_relies_on():
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: errors.append(context))
    app = web.Application()
    release = asyncio.Event()

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def socket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await release.wait()
        await ws.close()
        return ws

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late")

    app.router.add_get("/", hello)
    app.router.add_get("/slow", slow)
    app.router.add_get("/ws", socket)
    guard = Guard("pin", ConnectionLimits(2, 5.0, 30.0), ListenerMetrics(CollectorRegistry()))
    runner = GuardedRunner(app, guard)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    writers: list[asyncio.StreamWriter] = []
    try:
        async with aiohttp.ClientSession() as http:
            reader, writer = await asyncio.open_connection(host, port)
            writers.append(writer)
            writer.write(b"GET / HTTP/1.1\r\nHost: pin\r\n\r\n")
            assert (await _answer(reader)).endswith(b"ok")
            (plain,) = guard.open
            assert isinstance(plain, GuardedHandler)
            assert plain._request_count == 1 == plain.finished and plain.idle, checked()
            writer.write(b"GET / HTTP/1.1\r\n")  # half a head: not a request yet
            await asyncio.sleep(0.05)
            assert plain._request_count == 1 and plain.idle, f"a half-sent head counted as a request; {checked()}"
            writer.write(b"Host: pin\r\n\r\n")
            assert (await _answer(reader)).endswith(b"ok")
            assert plain._request_count == 2 == plain.finished, checked()

            ws = await http.ws_connect(f"http://{host}:{port}/ws")
            upgraded = next(h for h in guard.open if h is not plain)
            await _until(lambda: upgraded._upgraded, "a WebSocket upgrade did not set _upgraded")
            assert not upgraded.idle

            # At the bound with no idle connection (the keep-alive one is made busy): refused,
            # never registered with the server, closed without touching it.
            writer.write(b"GET /slow HTTP/1.1\r\nHost: pin\r\n\r\n")
            await _until(lambda: plain._request_count == 3, "a parsed head was not counted")
            assert not plain.idle
            refused_reader, refused_writer = await asyncio.open_connection(host, port)
            writers.append(refused_writer)
            assert await refused_reader.read() == REFUSAL
            assert len(runner.server.connections) == 2 and len(guard.open) == 2, checked()
            release.set()
            assert (await _answer(reader)).endswith(b"late")
            await ws.close()
    finally:
        release.set()
        for w in writers:
            w.close()
            with contextlib.suppress(ConnectionError):
                await w.wait_closed()
        await runner.cleanup()
        loop.set_exception_handler(previous)
    assert errors == [], f"the event loop reported {errors}; {checked()}"
