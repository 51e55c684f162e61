"""Pins what the stream takes from aiohttp beyond its public API (services/stream/wire.py): the
names it reads exist with the meaning it relies on, and, over loopback with a real aiohttp
server and real clients (aiohttp's, ``websockets``), the handshake answers with the window the
client asked for and with context takeover unless it asked for ``server_no_context_takeover``,
prepared frames written through the wire (each compressed after the one before, with context
takeover) arrive decoded and in order with aiohttp's own control frames (ping, close), a
closing connection refuses a write, so does one on which aiohttp compressed a frame of its
own, and a client that stops reading pauses the wire until it reads again. An aiohttp upgrade
that moves any of it fails here."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random

import aiohttp
import pytest
import websockets
from aiohttp import web
from aiohttp._websocket.writer import WebSocketWriter
from aiohttp.base_protocol import BaseProtocol
from aiohttp.test_utils import TestServer
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

from tickerwire.services.stream.frames import Message
from tickerwire.services.stream.wire import StreamResponse, Wire

#: Frames of several sizes; the first repeats 1,100 bytes, which a 15-bit window compresses 1,100
#: bytes back (more than a client that asked for a 10-bit window can inflate).
PAYLOADS = [b'{"n":0,"data":"%s"}' % (bytes(random.Random(38).choices(range(97, 123), k=1100)) * 2)] + [
    b'{"type":"post.created","n":%d,"data":"%s"}' % (i, b"x" * (i * 37 % 300)) for i in range(1, 30)
]


def test_the_private_names_the_wire_reads_are_there():
    handshake = inspect.signature(web.WebSocketResponse.__dict__["_handshake"])
    assert list(handshake.parameters) == ["self", "request"]
    writer = inspect.signature(WebSocketWriter.__init__).parameters
    assert {"protocol", "transport", "compress", "notakeover"} <= set(writer)
    assert "_send_lock" in WebSocketWriter.__init__.__code__.co_names
    assert "_closing" in WebSocketWriter.__init__.__code__.co_names
    assert "_compressobj" in WebSocketWriter.__init__.__code__.co_names
    assert "_compressobj" in WebSocketWriter._get_compressor.__code__.co_names
    assert isinstance(BaseProtocol.__dict__["writing_paused"], property)
    assert inspect.iscoroutinefunction(BaseProtocol.__dict__["_drain_helper"])


class Server:
    """A real aiohttp server whose handler writes ``PAYLOADS`` as prepared frames, with an
    aiohttp ping after the first ten, then closes; it keeps each connection's wire."""

    def __init__(self, *, stall: bool = False, own_frame: bool = False) -> None:
        self.wires: list[Wire] = []
        self.late_write: BaseException | None = None
        self.own_write: BaseException | None = None
        self.stall = stall
        self.own_frame = own_frame
        self.paused_seen = asyncio.Event()
        self.drained = asyncio.Event()
        app = web.Application()
        app.router.add_get("/", self.handle)
        self.server = TestServer(app, host="127.0.0.1")

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = StreamResponse(compress=True)
        await ws.prepare(request)
        wire = Wire(ws)
        self.wires.append(wire)
        if self.stall:
            big = Message(bytes(range(256)) * 1024)  # 256 KiB a frame, incompressible enough
            while not wire.paused:
                wire.write(big.frame(0))
                await asyncio.sleep(0)
            self.paused_seen.set()
            await wire.drain()  # returns once the client reads again
            self.drained.set()
        if self.own_frame:  # aiohttp compresses a message with a history of its own
            await ws.send_str("compressed by aiohttp")
            try:
                wire.write(Message(PAYLOADS[1]).frame(wire.encoding))
            except RuntimeError as exc:
                self.own_write = exc
            await ws.close()
            return ws
        last = None
        for i, payload in enumerate(PAYLOADS):
            message = Message(payload, shared=True)
            wire.write(message.frame_after(wire.encoding, last) if wire.takeover else message.frame(wire.encoding))
            last = message
            if i == 9:
                await ws.ping(b"between")
        await ws.close(code=4000, message=b"done")
        try:
            wire.write(Message(PAYLOADS[0]).frame(wire.encoding))
        except ConnectionResetError as exc:
            self.late_write = exc
        return ws

    async def __aenter__(self) -> str:
        await self.server.start_server()
        return f"ws://127.0.0.1:{self.server.port}/"

    async def __aexit__(self, *exc) -> None:
        await self.server.close()


@pytest.mark.parametrize("compress", [15, 0], ids=["deflate", "plain"])
async def test_aiohttp_client_decodes_prepared_frames_in_order_with_pings_and_close(compress):
    server = Server()
    async with server as url, aiohttp.ClientSession() as session:
        async with session.ws_connect(url, compress=compress, autoping=False) as ws:
            negotiated = ws.compress
            got = []
            while not got or got[-1].type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                got.append(await ws.receive())
    assert negotiated == compress
    assert [w.encoding for w in server.wires] == [compress]
    texts = [m.data.encode() for m in got if m.type == aiohttp.WSMsgType.TEXT]
    assert texts == PAYLOADS
    kinds = [m.type for m in got]
    assert kinds.index(aiohttp.WSMsgType.PING) == 10  # after the first ten frames, before the rest
    assert kinds[-1] == aiohttp.WSMsgType.CLOSE and got[-1].data == 4000  # after every frame
    assert isinstance(server.late_write, ConnectionResetError)


@pytest.mark.parametrize(
    "window, notakeover",
    [(9, False), (10, False), (15, False), (15, True), (10, True), (None, False)],
    ids=["window-9", "window-10", "window-15", "window-15-no-takeover", "window-10-no-takeover", "no-offer"],
)
async def test_websockets_client_gets_its_window_and_decodes_every_frame(window, notakeover):
    server = Server()
    async with server as url:
        extensions = (
            None
            if window is None
            else [
                ClientPerMessageDeflateFactory(
                    server_max_window_bits=window, client_max_window_bits=True, server_no_context_takeover=notakeover
                )
            ]
        )
        async with websockets.connect(url, extensions=extensions, compression=None) as ws:
            header = ws.response.headers.get("Sec-WebSocket-Extensions")
            got = []
            with contextlib.suppress(websockets.ConnectionClosed):
                while True:
                    got.append((await ws.recv()).encode())
        assert ws.close_code == 4000
    assert got == PAYLOADS
    assert [(w.encoding, w.takeover) for w in server.wires] == [(window or 0, window is not None and not notakeover)]
    if window is None:
        assert header is None
    else:
        assert ("server_no_context_takeover" in header) == notakeover
        assert f"server_max_window_bits={window}" in header


async def test_a_frame_compressed_by_aiohttp_makes_the_wire_refuse_to_write():
    server = Server(own_frame=True)
    async with server as url, aiohttp.ClientSession() as session:
        async with session.ws_connect(url, compress=15) as ws:
            assert (await ws.receive()).data == "compressed by aiohttp"
            assert (await ws.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert isinstance(server.own_write, RuntimeError)


async def test_a_client_that_stops_reading_pauses_the_wire_until_it_reads_again():
    server = Server(stall=True)
    async with server as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.split(":")[2].strip("/")))
        writer.write(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        await asyncio.wait_for(server.paused_seen.wait(), 30)  # the client reads nothing
        await asyncio.sleep(0.2)
        assert not server.drained.is_set() and server.wires[0].paused
        while not server.drained.is_set():  # now it reads
            await asyncio.wait_for(reader.read(1 << 20), 30)
        writer.close()
