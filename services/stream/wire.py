"""The stream's only reach into aiohttp beyond its public API (pinned by
tests/unit/test_stream_wire.py, which fails when an aiohttp upgrade moves any of it).

aiohttp compresses each message per connection, with a compressor per connection, and has
no way to send finished frame bytes. Prepared frames (``frames.py``) need two things from it:

- the handshake answers a permessage-deflate offer with ``server_no_context_takeover`` (RFC
  7692 7.1.1.1 lets a server add it whatever the client offered): each message is then
  compressed with no history, so one compressed frame serves every connection with the same
  window (:class:`StreamResponse` overrides ``WebSocketResponse._handshake``);
- the connection's frames are written to its transport as they are (:class:`Wire`), behind the
  same checks aiohttp's writer makes (a closing writer or transport refuses) and with the same
  flow control (wait while the transport is above its high-water mark). aiohttp itself only
  writes control frames on these connections (ping, pong, close: never compressed, never under
  its send lock), each at once, in call order, so they stay ordered with the prepared frames.
"""

from __future__ import annotations

import asyncio

from aiohttp import hdrs, web
from aiohttp._websocket.helpers import ws_ext_gen
from aiohttp._websocket.writer import WebSocketWriter
from aiohttp.base_protocol import BaseProtocol


class StreamResponse(web.WebSocketResponse):
    """A WebSocketResponse whose permessage-deflate is always without server context takeover."""

    def _handshake(self, request):
        headers, protocol, compress, notakeover = super()._handshake(request)
        if compress:
            answer = ws_ext_gen(compress=compress, isserver=True, server_notakeover=True)
            if compress == 15 and "server_max_window_bits" in request.headers.get(hdrs.SEC_WEBSOCKET_EXTENSIONS, ""):
                # aiohttp leaves the default window unsaid; a client that asked for it (websockets) wants it said.
                answer += "; server_max_window_bits=15"
            headers[hdrs.SEC_WEBSOCKET_EXTENSIONS] = answer
            notakeover = True
        return headers, protocol, compress, notakeover


class Wire:
    """Writes finished frames to one prepared :class:`StreamResponse`'s transport."""

    __slots__ = ("encoding", "_writer", "_transport", "_protocol")

    def __init__(self, ws: web.WebSocketResponse) -> None:
        writer = ws._writer
        if not isinstance(writer, WebSocketWriter):
            raise RuntimeError("the WebSocket response is not prepared")
        if writer.compress and not writer.notakeover:
            raise RuntimeError("permessage-deflate was negotiated with server context takeover")
        #: The frames' encoding (frames.py): the server window bits of its deflate, 0 for none.
        self.encoding: int = writer.compress
        self._writer = writer
        self._transport: asyncio.Transport = writer.transport
        self._protocol: BaseProtocol = writer.protocol

    def write(self, data: bytes) -> None:
        """Hand ``data`` (whole frames) to the transport; ConnectionResetError once closing."""
        if self._writer._closing or self._transport.is_closing():
            raise ConnectionResetError("the WebSocket is closing")
        if self._writer._send_lock.locked():  # aiohttp compressing a frame of its own: a defect here
            raise RuntimeError("aiohttp's writer is sending a compressed frame")
        self._transport.write(data)

    @property
    def paused(self) -> bool:
        return self._protocol.writing_paused

    async def drain(self) -> None:
        """Wait while the transport holds more than its high-water mark (ConnectionResetError
        if the connection is lost meanwhile)."""
        if self._protocol.writing_paused:
            await self._protocol._drain_helper()
