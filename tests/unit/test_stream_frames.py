"""Prepared frames (services/stream/frames.py) and the hub's use of them: each message is built
into frame bytes once per encoding and those bytes go to every connection of that encoding; a
deflated frame needs no earlier message and no window beyond the one negotiated; a connection
with several messages waiting gets them in one write."""

from __future__ import annotations

import asyncio
import random
import zlib

import pytest

from tests.support.fakes import FakeSocket, unframe
from tickerwire.services.stream import protocol
from tickerwire.services.stream.frames import Message, frame
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics

#: Repeats 1,100 bytes: a 15-bit window compresses that 1,100 bytes back.
LONG_REPEAT = bytes(random.Random(38).choices(range(97, 123), k=1100)) * 2


def inflate_within(data: bytes, window_bits: int) -> bytes:
    """Inflate a frame's payload 64 bytes of output at a time, so that every back reference is
    read from a window of ``window_bits`` (zlib reports one reaching further back)."""
    decoder, out, rest = zlib.decompressobj(-window_bits), b"", data + b"\x00\x00\xff\xff"
    while True:
        chunk = decoder.decompress(rest, 64)
        out, rest = out + chunk, decoder.unconsumed_tail
        if not chunk and not rest:
            return out


def payload_of(built: bytes) -> bytes:
    n, at = built[1] & 0x7F, 2
    if n == 126:
        n, at = int.from_bytes(built[2:4], "big"), 4
    elif n == 127:
        n, at = int.from_bytes(built[2:10], "big"), 10
    assert len(built) == at + n
    return built[at:]


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536])
def test_a_plain_frame_is_one_final_text_frame_with_the_payload_as_is(size):
    payload = b"a" * size
    built = frame(payload, 0)
    assert built[0] == 0x81 and unframe(built) == [payload]


@pytest.mark.parametrize("window", [9, 10, 12, 15])
def test_a_deflated_frame_inflates_alone_within_its_window(window):
    for payload in (LONG_REPEAT, protocol.ping(), b"x" * 70_000):
        built = frame(payload, window)
        assert built[0] == 0xC1  # final, RSV1 (compressed), text
        assert inflate_within(payload_of(built), window) == payload
    assert len(frame(LONG_REPEAT, 15)) < len(LONG_REPEAT) * 0.7


def test_each_deflated_frame_carries_no_context_from_the_messages_before_it():
    first, second = frame(LONG_REPEAT, 15), frame(LONG_REPEAT, 15)
    assert first == second  # the same message, the same bytes: nothing of the first carried over
    assert inflate_within(payload_of(second), 15) == LONG_REPEAT  # a fresh decoder reads it


def test_a_message_builds_each_encoding_once_and_hands_out_the_same_bytes():
    message = Message(LONG_REPEAT)
    assert message.frame(15) is message.frame(15)
    assert message.frame(0) is message.frame(0) and message.frame(10) is not message.frame(15)
    assert sorted(message.frames) == [0, 10, 15]


async def test_the_hub_builds_each_message_once_per_encoding_and_writes_queued_ones_together():
    metrics = StreamMetrics()
    hub = Hub(metrics, queue_size=16, sink_of=lambda ws: ws)
    sockets = [FakeSocket(encoding=e) for e in (0, 0, 0, 15, 15, 15, 10)]
    conns = [hub.open(ws, None, "ws", f"k{i}", f"ses_{i}") for i, ws in enumerate(sockets)]
    payloads = [protocol.post_created(f'{{"id":{i},"lede":"{LONG_REPEAT.decode()}"}}', 0, i) for i in range(5)]
    for payload in payloads:
        hub.broadcast(payload)
    for _ in range(5):
        await asyncio.sleep(0)
    for ws in sockets:
        assert len(ws.frames) == 1  # five messages waiting: one write
        assert ws.messages == payloads
        if ws.encoding:
            assert inflate_within(payload_of(unframe_first(ws.frames[0])), ws.encoding)
    assert sockets[0].frames[0] == sockets[1].frames[0] and sockets[3].frames[0] == sockets[4].frames[0]
    assert sockets[0].frames[0] != sockets[3].frames[0] != sockets[6].frames[0]

    def built(encoding: str) -> float | None:
        return metrics.registry.get_sample_value("tickerwire_stream_frames_built_total", {"encoding": encoding})

    assert (built("plain"), built("deflate-15"), built("deflate-10")) == (5, 5, 5)  # 7 connections, 3 encodings
    assert metrics.registry.get_sample_value("tickerwire_stream_messages_sent_total", {"type": "post.created"}) == 35
    for conn in conns:
        await hub.forget(conn)


def unframe_first(data: bytes) -> bytes:
    """The first whole frame of several written together."""
    n, at = data[1] & 0x7F, 2
    if n == 126:
        n, at = int.from_bytes(data[2:4], "big"), 4
    return data[: at + n]
