"""Prepared frames: each outgoing message becomes finished WebSocket frame bytes once per
encoding and history, and the same bytes go to every connection that shares them.

An encoding is what a connection negotiated for the server's messages: ``0`` (no compression)
or the ``server_max_window_bits`` of its permessage-deflate (RFC 7692), 9..15. A message can be
compressed two ways, both valid for a connection of that window:

- with no history (:meth:`Message.frame`): the frame depends on the message and the window
  only, and one frame serves every connection of that window (as gorilla/websocket's
  ``PreparedMessage`` does). It is the only frame for a connection whose client asked for
  ``server_no_context_takeover`` (its inflater forgets every message), and always valid.
- after a previous message (:meth:`Message.frame_after`), with context takeover (the stream's
  answer unless the client asked otherwise, ``wire.py``): the client's inflater keeps a window
  of every message it inflated, so the last bytes of that window are the previous compressed
  message it received. Deflating with that message's text as preset dictionary (its last 2^w
  bytes, and deflate never reaches further back than its window) gives a frame valid exactly
  for the connections whose last compressed message was that one: the one frame serves every
  connection that got the same previous broadcast. The hub hands each connection the frame
  for its own previous message, in the order its frames are written (``hub.py``).

A message shared by many connections (a broadcast, a post) is compressed after a previous
message only when that one was shared too (a connection whose last message was its own
``ready`` gets the no-history frame), and after at most :data:`MAX_HISTORIES` distinct previous
messages; a message of one connection's own (its ``ready``, a replayed post) is compressed
for that connection alone, after whatever it got last.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Callable

#: RFC 7692 7.2.1: the empty stored block a sync flush ends with, left off the wire.
DEFLATE_TAIL = b"\x00\x00\xff\xff"
#: Compressed once per message and encoding, not once per connection: the best ratio is affordable.
LEVEL = zlib.Z_BEST_COMPRESSION
#: FIN + opcode 1 (text); RSV1 marks a compressed message (RFC 7692 6).
TEXT = 0x81
DEFLATED_TEXT = 0xC1
#: Distinct previous messages a shared message is compressed after; connections with another
#: previous message get its no-history frame (bounds the work and memory of one message).
MAX_HISTORIES = 16

_compressors: dict[int, Any] = {}


def deflate(payload: bytes, window_bits: int, previous: bytes = b"") -> bytes:
    """``payload`` compressed as RFC 7692 7.2.1 puts it on the wire: with no context from
    earlier messages, or, given ``previous``, for an inflater whose window ends with
    ``previous`` (its last ``2**window_bits`` bytes are the preset dictionary)."""
    if previous:
        compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, -window_bits, 9, zdict=previous[-(1 << window_bits) :])
        data = compressor.compress(payload) + compressor.flush(zlib.Z_SYNC_FLUSH)
    else:  # a full flush leaves the shared compressor with no history for the next message
        alone = _compressors.get(window_bits)
        if alone is None:
            alone = _compressors[window_bits] = zlib.compressobj(LEVEL, zlib.DEFLATED, -window_bits, 9)
        data = alone.compress(payload) + alone.flush(zlib.Z_FULL_FLUSH)
    return data[:-4] if data.endswith(DEFLATE_TAIL) else data


def frame(payload: bytes, encoding: int, previous: bytes = b"") -> bytes:
    """One final, unmasked text frame (RFC 6455 5.2) carrying ``payload`` in ``encoding``
    (deflated after ``previous``, when given: see :func:`deflate`)."""
    if encoding:
        first, data = DEFLATED_TEXT, deflate(payload, encoding, previous)
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
    """One outgoing text message, encoded once (``payload``); each of its frames is built at
    first use and the same bytes object is handed to every later connection that takes it.
    ``tag`` is the caller's (the hub keeps the counter of the message's type there);
    ``shared``: queued to many connections (a broadcast), not one connection's own; ``key``:
    the announcement a ``post.created`` carries, (partition, offset, lang), in the log of
    ``epoch``."""

    __slots__ = ("payload", "tag", "shared", "key", "epoch", "frames", "after", "_hit")

    def __init__(
        self,
        payload: bytes,
        tag: Any = None,
        shared: bool = False,
        key: tuple[int, int, str] | None = None,
        epoch: str = "",
    ) -> None:
        self.payload = payload
        self.tag = tag
        self.shared = shared
        self.key = key
        self.epoch = epoch
        #: By encoding: the frame with no history.
        self.frames: dict[int, bytes] = {}
        #: By (encoding, previous message's payload): the frame compressed after that message.
        self.after: dict[tuple[int, bytes], bytes] = {}
        #: The last of them handed out, for the next connection (most have the same history).
        self._hit: tuple[int, bytes, bytes] | None = None

    def frame(self, encoding: int, built: Callable[[], object] | None = None) -> bytes:
        """The frame with no history (``built`` is called when it is built now)."""
        frame_ = self.frames.get(encoding)
        if frame_ is None:
            frame_ = self.frames[encoding] = frame(self.payload, encoding)
            if built is not None:
                built()
        return frame_

    def frame_after(self, encoding: int, previous: Message | None, built: Callable[[], object] | None = None) -> bytes:
        """The frame for a connection with context takeover whose client's last compressed
        message was ``previous`` (None: none yet), in ``encoding`` (a deflate window)."""
        if previous is None or (self.shared and not previous.shared):
            return self.frame(encoding, built)
        hit = self._hit
        if hit is not None and hit[1] is previous.payload and hit[0] == encoding:
            return hit[2]
        key = (encoding, previous.payload)
        frame_ = self.after.get(key)
        if frame_ is None:
            if len(self.after) >= MAX_HISTORIES:
                return self.frame(encoding, built)
            frame_ = self.after[key] = frame(self.payload, encoding, previous.payload)
            if built is not None:
                built()
        self._hit = (encoding, previous.payload, frame_)
        return frame_
