"""Prepared frames: each outgoing message becomes finished WebSocket frame bytes once per
encoding, and the same bytes go to every connection of that encoding.

An encoding is what a connection negotiated for the server's messages: ``0`` (no compression)
or the ``server_max_window_bits`` of its permessage-deflate (RFC 7692), 9..15. The stream
answers every deflate offer with ``server_no_context_takeover`` (``wire.py``), so a message is
compressed with no history: its compressed frame depends on the message and the window only,
and one frame serves every connection with that window (as gorilla/websocket's
``PreparedMessage`` does). A message is compressed once per encoding that asks for it, at
the first connection of that encoding, and never again.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

#: RFC 7692 7.2.1: the empty stored block a sync flush ends with, left off the wire.
DEFLATE_TAIL = b"\x00\x00\xff\xff"
#: Compressed once per message and encoding, not once per connection: the best ratio is affordable.
LEVEL = zlib.Z_BEST_COMPRESSION
#: FIN + opcode 1 (text); RSV1 marks a compressed message (RFC 7692 6).
TEXT = 0x81
DEFLATED_TEXT = 0xC1

_compressors: dict[int, Any] = {}


def deflate(payload: bytes, window_bits: int) -> bytes:
    """``payload`` compressed with no context from earlier messages, as RFC 7692 7.2.1 puts it on
    the wire. A full flush leaves the shared compressor with no history for the next message."""
    compressor = _compressors.get(window_bits)
    if compressor is None:
        compressor = _compressors[window_bits] = zlib.compressobj(LEVEL, zlib.DEFLATED, -window_bits, 9)
    data = compressor.compress(payload) + compressor.flush(zlib.Z_FULL_FLUSH)
    return data[:-4] if data.endswith(DEFLATE_TAIL) else data


def frame(payload: bytes, encoding: int) -> bytes:
    """One final, unmasked text frame (RFC 6455 5.2) carrying ``payload`` in ``encoding``."""
    if encoding:
        first, data = DEFLATED_TEXT, deflate(payload, encoding)
    else:
        first, data = TEXT, payload
    n = len(data)
    if n < 126:
        header = bytes((first, n))
    elif n < 65536:
        header = struct.pack("!BBH", first, 126, n)
    else:
        header = struct.pack("!BBQ", first, 127, n)
    return header + data


class Message:
    """One outgoing text message, encoded once (``payload``); its frame per encoding is built
    at first use and the same bytes object is handed to every later connection of that
    encoding. ``tag`` is the caller's (the hub keeps the counter of the message's type there)."""

    __slots__ = ("payload", "tag", "frames")

    def __init__(self, payload: bytes, tag: Any = None) -> None:
        self.payload = payload
        self.tag = tag
        self.frames: dict[int, bytes] = {}

    def frame(self, encoding: int) -> bytes:
        built = self.frames.get(encoding)
        if built is None:
            built = self.frames[encoding] = frame(self.payload, encoding)
        return built
