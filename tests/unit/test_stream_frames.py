"""Prepared frames (services/stream/frames.py) and the hub's use of them: each message is built
into frame bytes once per encoding and history and those bytes go to every connection that
shares them; a deflated frame needs no earlier message, or, compressed after one, exactly that
message at the end of the client's window, and no window beyond the one negotiated; the hub
gives every connection the frame for its own previous message, through any mix of broadcasts,
filtered posts, cursors, own messages and resumes; a connection with several messages waiting
gets them in one write."""

from __future__ import annotations

import asyncio
import random
import zlib

import pytest

from tests.support.fakes import FakeSocket, inflate, unframe
from tickerwire.services.readmodel.filters import EVERYTHING, AnnouncementFilter, FilterFacts
from tickerwire.services.stream import protocol
from tickerwire.services.stream.frames import MAX_HISTORIES, Message, frame
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics

#: Repeats 1,100 bytes: a 15-bit window compresses that 1,100 bytes back.
LONG_REPEAT = bytes(random.Random(38).choices(range(97, 123), k=1100)) * 2


def inflate_within(data: bytes, window_bits: int) -> bytes:
    """Inflate a frame's payload alone, every back reference read from a window of ``window_bits``."""
    return inflate(zlib.decompressobj(-window_bits), data)


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


def post(n: int, lede: str = "") -> bytes:
    """A post.created like the stream's: most of its bytes are in every post (keys, categories)."""
    rng = random.Random(n)
    words = " ".join(rng.choice(("bitcoin", "ether", "market", "rally", "funds", "price", "week")) for _ in range(60))
    lean = (
        f'{{"id":{n},"slug":"post-{n}","published_at":"2026-01-01T00:00:{n % 60:02d}Z","lang":"en-US",'
        f'"canonical_url":"https://news.example/en/post-{n}","title":"Post {n}: {words[:60]}",'
        f'"lede":"{lede or words}","cover_image_url":null,"categories":[{{"slug":"markets","name":"Markets"}}],'
        f'"importance":{n % 3},"sentiment":"neutral"}}'
    )
    return protocol.post_created(lean, 0, n)


def client_reads(previous: list[bytes], built: bytes, window_bits: int) -> bytes:
    """What a client with context takeover inflates ``built`` to after ``previous`` (compressed alone)."""
    decoder = zlib.decompressobj(-window_bits)
    for payload in previous:
        inflate(decoder, payload_of(frame(payload, window_bits)))
    return inflate(decoder, payload_of(built))


@pytest.mark.parametrize("window", [9, 10, 12, 15])
def test_a_frame_after_a_message_inflates_after_that_message_only_and_within_its_window(window):
    first, second, other = post(1, LONG_REPEAT.decode()), post(2, LONG_REPEAT.decode()), post(3)
    cases = (
        (first, second, True),
        (post(4), post(5), True),
        (other, protocol.ping(), False),
        (second, LONG_REPEAT, False),
    )
    for previous, payload, alike in cases:
        after = frame(payload, window, previous)
        assert after[0] == 0xC1
        assert client_reads([post(9), previous], after, window) == payload  # any history, ending with previous
        if not alike:
            continue
        assert len(after) < len(frame(payload, window))  # two posts: the previous one is worth it
        with pytest.raises(AssertionError):  # after another message, it is not the payload (or not deflate)
            try:
                got = client_reads([previous, b"#" * 600], after, window)
            except zlib.error:
                got = b""
            assert got == payload


def test_a_shared_message_is_compressed_after_a_shared_one_only_and_after_a_bounded_number():
    shared, own, nxt = Message(post(1), shared=True), Message(protocol.ready("ses_a")), Message(post(2), shared=True)
    assert nxt.frame_after(15, None) is nxt.frame(15)
    assert nxt.frame_after(15, own) is nxt.frame(15)  # one connection's own ready: no history
    assert nxt.frame_after(15, shared) is nxt.frame_after(15, shared) != nxt.frame(15)
    assert Message(post(3)).frame_after(15, own) != Message(post(3)).frame(15)  # own after own: its history
    other = Message(post(4), shared=True)
    for previous in (other, shared, other, shared):  # alternating histories: each its own frame
        assert nxt.frame_after(15, previous) is nxt.after[(15, previous.payload)]
    assert nxt.frame_after(15, shared) != nxt.frame_after(15, other)
    for n in range(MAX_HISTORIES + 3):
        nxt.frame_after(15, Message(post(100 + n), shared=True))
    assert len(nxt.after) == MAX_HISTORIES
    assert nxt.frame_after(15, Message(post(999), shared=True)) is nxt.frame(15)


class Recorder:
    """Every message queued to one connection, in the order the hub queues them."""

    def __init__(self, ws: FakeSocket, stream_filter: AnnouncementFilter = EVERYTHING, cursors: bool = False) -> None:
        self.ws, self.filter, self.cursors = ws, stream_filter, cursors
        self.expected: list[bytes] = []


class MixedRun:
    """The connections of :func:`test_every_connection_inflates_every_message_after_its_own_previous_one`
    and what each must read: broadcasts, posts through filters, messages of one connection's own,
    and one connection that resumes (its live messages held while its replay is queued)."""

    def __init__(self, hub: Hub, clients: list[Recorder]) -> None:
        self.hub, self.clients = hub, clients
        self.conns = {}
        for i, c in enumerate(clients):
            self.conns[i] = hub.open(c.ws, None, "ws", f"k{i}", f"ses_{i}", c.filter, cursors=c.cursors)
            ready = protocol.ready(f"ses_{i}")
            hub.send(self.conns[i], ready)
            c.expected.append(ready)
        self.resumed: Recorder | None = None
        self.replaying = False
        self.held: list[bytes] = []  # the resuming connection's live messages while it replays

    def expect(self, c: Recorder, payload: bytes) -> None:
        (self.held if c is self.resumed and self.replaying else c.expected).append(payload)

    def resume(self) -> None:
        self.resumed = Recorder(FakeSocket(encoding=15, takeover=True), cursors=True)
        self.clients.append(self.resumed)
        self.conns[len(self.clients) - 1] = self.hub.open(
            self.resumed.ws, None, "ws", "kr", "ses_r", cursors=True, replaying=True
        )
        self.replaying = True

    def ping(self) -> None:
        ping = protocol.ping()
        self.hub.broadcast(ping)
        for c in self.clients:
            self.expect(c, ping)

    def own(self, n: int, rng: random.Random) -> None:
        i = rng.randrange(len(self.clients) - (self.resumed is not None))
        own = protocol.ready(f"ses_{i}", f"cursor-{n}")
        self.hub.send(self.conns[i], own)
        self.clients[i].expected.append(own)

    def post(self, n: int, rng: random.Random) -> None:
        facts = FilterFacts("en-US", frozenset(("BTC",) if rng.random() < 0.5 else ("ETH",)), frozenset())
        payload = post(n)
        with_cursor = protocol.post_created(payload.split(b'"data":', 1)[1][:-1].decode(), 0, n, f"c{n}")
        self.hub.publish(payload, facts, with_cursor)
        for c in self.clients:
            if c.filter.admits(facts):
                self.expect(c, with_cursor if c.cursors else payload)

    async def replay(self) -> None:
        """The replay (the connection's own messages), then the held live ones."""
        assert self.resumed is not None
        conn = self.conns[len(self.clients) - 1]
        replay = [protocol.ready("ses_r", "c0", True)] + [post(1000 + k) for k in range(5)]
        for payload in replay:
            await self.hub.put(conn, payload)
        await self.hub.go_live(conn)
        self.resumed.expected += replay + self.held
        self.replaying = False


async def test_every_connection_inflates_every_message_after_its_own_previous_one():
    """The hub's choice of history, through a long mixed sequence: connections of every window,
    with context takeover and without, plain, filtered, with cursors, with messages of their own
    between broadcasts, one resuming while posts go live; each connection's frames are inflated
    by one inflater of its window, as its client reads them (FakeSocket.messages). A frame
    compressed after any message but the connection's true previous one fails here."""
    hub = Hub(StreamMetrics(), queue_size=4096, sink_of=lambda ws: ws)
    btc = AnnouncementFilter(tickers=("BTC",))
    run = MixedRun(
        hub,
        [
            Recorder(FakeSocket(encoding=15, takeover=True)),
            Recorder(FakeSocket(encoding=15, takeover=True)),
            Recorder(FakeSocket(encoding=15, takeover=True), btc),
            Recorder(FakeSocket(encoding=15, takeover=True), cursors=True),
            Recorder(FakeSocket(encoding=10, takeover=True)),
            Recorder(FakeSocket(encoding=9, takeover=True), btc, cursors=True),
            Recorder(FakeSocket(encoding=15)),
            Recorder(FakeSocket(encoding=9)),
            Recorder(FakeSocket()),
        ],
    )
    rng = random.Random(38)
    for n in range(1, 121):
        if n == 40:  # a connection resumes: live posts are held while its replay is queued
            run.resume()
        step = rng.random()
        if step < 0.15:
            run.ping()
        elif step < 0.25:  # a message of one connection's own between broadcasts
            run.own(n, rng)
        else:
            run.post(n, rng)
        if n == 49:
            await run.replay()
        if rng.random() < 0.5:  # writers take their messages now and then: batches of every size
            await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.sleep(0)
    for i, c in enumerate(run.clients):
        assert c.ws.messages == c.expected, i
    takeover, alone = run.clients[0].ws, run.clients[6].ws  # both 15-bit windows, unfiltered, no cursors
    assert len(b"".join(takeover.frames)) < 0.7 * len(b"".join(alone.frames))
    for conn in run.conns.values():
        await hub.forget(conn)


async def test_connections_that_got_the_same_previous_message_share_its_next_frame():
    metrics = StreamMetrics()
    hub = Hub(metrics, queue_size=16, sink_of=lambda ws: ws)
    btc = AnnouncementFilter(tickers=("BTC",))
    sockets = [FakeSocket(encoding=15, takeover=True) for _ in range(4)]
    conns = [
        hub.open(ws, None, "ws", f"k{i}", f"ses_{i}", btc if i == 3 else EVERYTHING) for i, ws in enumerate(sockets)
    ]
    hub.publish(post(1), FilterFacts("en-US", frozenset({"BTC"}), frozenset()))
    await asyncio.sleep(0)
    hub.publish(post(2), FilterFacts("en-US", frozenset({"ETH"}), frozenset()))  # not to the BTC filter
    await asyncio.sleep(0)
    hub.send(conns[1], protocol.ready("ses_1"))  # its own, between two broadcasts
    await asyncio.sleep(0)
    hub.broadcast(post(3))
    for _ in range(3):
        await asyncio.sleep(0)
    last = [ws.frames[-1] for ws in sockets]
    assert last[0] is last[2]  # the same previous message (post 2): the same bytes object
    assert inflate_within(payload_of(last[1]), 15).startswith(b'{"type":"post.created"')  # after its ready: alone
    assert len({last[0], last[1], last[3]}) == 3  # after post 2, after nothing shared, after post 1
    built = metrics.registry.get_sample_value("tickerwire_stream_frames_built_total", {"encoding": "deflate-15"})
    assert built == 1 + 1 + 1 + 3  # post 1 alone; post 2 after post 1; the ready; post 3 three ways
    for conn in conns:
        await hub.forget(conn)
