"""The stream's only reach into aiohttp beyond its public API (pinned by
tests/unit/test_stream_wire.py, which fails when an aiohttp upgrade moves any of it).

aiohttp compresses each message per connection, with a compressor per connection, and has
no way to send finished frame bytes. Prepared frames (``frames.py``) need two things from it:

- the handshake answers a permessage-deflate offer with the window the client asked for and
  with context takeover unless the client asked for ``server_no_context_takeover``
  (:class:`StreamResponse` overrides ``WebSocketResponse._handshake`` only to say a 15-bit
  window to a client that asked for it); the frames of a connection with context takeover
  are compressed after its previous message, the others' with no history (``frames.py``);
- the connection's frames are written to its transport as they are (:class:`Wire`), behind the
  same checks aiohttp's writer makes (a closing writer or transport refuses) and with the same
  flow control (wait while the transport is above its high-water mark). aiohttp itself only
  writes control frames on these connections (ping, pong, close: never compressed, never under
  its send lock, no part of the client's deflate window), each at once, in call order, so they
  stay ordered with the prepared frames. A data frame compressed by aiohttp would put its own
  history in the client's window: the wire refuses to write after one.
"""

from __future__ import annotations

import asyncio

from aiohttp import hdrs, web
from aiohttp._websocket.writer import WebSocketWriter
from aiohttp.base_protocol import BaseProtocol


class StreamResponse(web.WebSocketResponse):
    """A WebSocketResponse whose permessage-deflate answer always states the server's window
    when the client asked for one."""

    def _handshake(self, request):
        headers, protocol, compress, notakeover = super()._handshake(request)
        if compress == 15 and "server_max_window_bits" in request.headers.get(hdrs.SEC_WEBSOCKET_EXTENSIONS, ""):
            # aiohttp leaves the default window unsaid; a client that asked for it (websockets) wants it said.
            headers[hdrs.SEC_WEBSOCKET_EXTENSIONS] += "; server_max_window_bits=15"
        return headers, protocol, compress, notakeover


class Wire:
    """Writes finished frames to one prepared :class:`StreamResponse`'s transport."""

    __slots__ = ("encoding", "takeover", "_writer", "_transport", "_protocol")

    def __init__(self, ws: web.WebSocketResponse) -> None:
        writer = ws._writer
        if not isinstance(writer, WebSocketWriter):
            raise RuntimeError("the WebSocket response is not prepared")
        #: The frames' encoding (frames.py): the server window bits of its deflate, 0 for none.
        self.encoding: int = writer.compress
        #: Deflate with context takeover: the client inflates each message after the ones before.
        self.takeover: bool = bool(writer.compress) and not writer.notakeover
        self._writer = writer
        self._transport: asyncio.Transport = writer.transport
        self._protocol: BaseProtocol = writer.protocol

    def write(self, data: bytes) -> None:
        """Hand ``data`` (whole frames) to the transport; ConnectionResetError once closing."""
        if self._writer._closing or self._transport.is_closing():
            raise ConnectionResetError("the WebSocket is closing")
        if self._writer._send_lock.locked() or self._writer._compressobj is not None:
            # aiohttp compressed a data frame of its own (its history is not the frames'): a defect here
            raise RuntimeError("aiohttp's writer compressed a frame")
        self._transport.write(data)

    @property
    def paused(self) -> bool:
        return self._protocol.writing_paused

    async def drain(self) -> None:
        """Wait while the transport holds more than its high-water mark (ConnectionResetError
        if the connection is lost meanwhile)."""
        if self._protocol.writing_paused:
            await self._protocol._drain_helper()
