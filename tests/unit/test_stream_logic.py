"""Pure logic of the stream: message encoding and
the hub's fan-out (with a fake socket standing in for a client)."""

from __future__ import annotations

import asyncio
import re

import orjson

from tests.support.fakes import FakeSocket
from tickerwire.services.readmodel.filters import FilterFacts
from tickerwire.services.stream import protocol
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics

TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def test_messages_are_json_objects_starting_with_their_type():
    lean = '{"id":7,"lang":"de-DE","title":"Ü \\"quoted\\""}'
    for raw, kind in (
        (protocol.ready("ses_x"), "ready"),
        (protocol.ping(), "ping"),
        (protocol.post_created(lean, 2, 1611), "post.created"),
    ):
        assert raw.startswith(b'{"type":"' + kind.encode() + b'"')  # the hub counts sends by this prefix
        body = orjson.loads(raw)
        assert body["type"] == kind and TS.match(body["ts"])
    assert orjson.loads(protocol.post_created(lean, 2, 1611))["data"] == orjson.loads(lean)
    assert orjson.loads(protocol.post_created(lean, 2, 1611))["log_position"] == "2:1611"
    assert set(orjson.loads(protocol.ping())) == {"type", "ts"}


async def test_a_stuck_client_is_closed_with_4008_and_the_others_get_every_message():
    metrics = StreamMetrics()
    hub = Hub(metrics, queue_size=4, sink_of=lambda ws: ws)
    healthy, stuck = FakeSocket(), FakeSocket(stuck=True)
    a = hub.open(healthy, None, "ws", "k1", "ses_a")
    b = hub.open(stuck, None, "ws", "k2", "ses_b")
    messages = [protocol.post_created(f'{{"id":{i}}}', 0, i) for i in range(20)]
    for message in messages:
        hub.broadcast(message)
        await asyncio.sleep(0)  # as the feed does: writers take their message
    for _ in range(5):
        await asyncio.sleep(0)
    assert healthy.messages == messages  # every message, in order
    assert b.closing and not a.closing
    assert (stuck.close_code, stuck.close_reason) == (4008, b"SLOW_CONSUMER")
    assert metrics.registry.get_sample_value("tickerwire_stream_slow_clients_closed_total") == 1
    await hub.forget(a)
    await hub.forget(b)


async def test_a_writer_that_fails_on_its_own_closes_its_client_with_1011_and_logs_an_error(caplog):
    metrics = StreamMetrics()
    hub = Hub(metrics, queue_size=4, sink_of=lambda ws: ws)
    healthy, broken = FakeSocket(), FakeSocket(fail=ValueError("a defect in the write path"))
    a = hub.open(healthy, None, "ws", "k1", "ses_a")
    b = hub.open(broken, None, "ws", "k2", "ses_b")
    hub.broadcast(protocol.ping())
    for _ in range(5):
        await asyncio.sleep(0)
    assert (broken.close_code, broken.close_reason) == (1011, b"INTERNAL_ERROR")
    assert b.closing and not a.closing and len(healthy.messages) == 1
    assert [r.levelname for r in caplog.records if r.getMessage() == "stream writer failed"] == ["ERROR"]
    assert "a defect in the write path" in caplog.text
    await hub.forget(a)
    await hub.forget(b)


async def test_shutdown_closes_every_connection_with_1001():
    hub = Hub(StreamMetrics(), queue_size=4, sink_of=lambda ws: ws)
    sockets = [FakeSocket() for _ in range(3)]
    for i, ws in enumerate(sockets):
        hub.open(ws, None, "ws", f"k{i}", f"ses_{i}")
    await hub.shutdown()
    assert [(ws.close_code, ws.close_reason) for ws in sockets] == [(1001, b"SERVER_SHUTTING_DOWN")] * 3
    for conn in list(hub.connections.values()):
        await hub.forget(conn)


async def test_a_connection_never_gets_an_announcement_twice_nor_one_behind_the_last_of_its_partition(caplog):
    # Whatever hands the hub an announcement again (a replay and the live feed overlapping, a
    # feed that read a record twice), the connection's writer writes each once, in order per
    # partition, and counts and logs what it held back; a new log's epoch starts afresh.
    metrics = StreamMetrics()
    hub = Hub(metrics, queue_size=16, sink_of=lambda ws: ws)
    ws = FakeSocket()
    conn = hub.open(ws, None, "ws", "k1", "ses_a", cursors=True)
    facts = FilterFacts.of("en-US", (), ())
    sent = [(0, 146, "de-DE"), (0, 146, "en-US"), (1, 9, "en-US"), (0, 146, "en-US"), (0, 145, "fr-FR")]
    for partition, offset, lang in sent:
        payload = protocol.post_created(f'{{"id":{offset},"lang":"{lang}"}}', partition, offset)
        hub.publish(payload, facts, payload, (partition, offset, lang), "e1")
    await hub.put(conn, protocol.post_created('{"id":146,"lang":"en-US"}', 0, 146), (0, 146, "en-US"), "e1")
    await hub.put(conn, protocol.post_created('{"id":3,"lang":"en-US"}', 0, 3), (0, 3, "en-US"), "e2")  # a new log
    for _ in range(5):
        await asyncio.sleep(0)
    got = [(m["log_position"], m["data"]["lang"]) for m in map(orjson.loads, ws.messages)]
    assert got == [("0:146", "de-DE"), ("0:146", "en-US"), ("1:9", "en-US"), ("0:3", "en-US")]
    assert metrics.registry.get_sample_value("tickerwire_stream_repeats_dropped_total") == 3
    assert [r.levelname for r in caplog.records if "not sending announcement" in r.getMessage()] == ["WARNING"] * 3
    await hub.forget(conn)


async def test_a_live_message_held_before_the_replay_read_the_cursor_is_dropped_when_the_cursor_covers_it():
    # Two stream processes: the client's cursor came from the one ahead; on this one the feed
    # announces what the cursor covers while the replay is still reading it. Held then, it is
    # dropped at the switch to live (not sent twice); what comes after the cursor is sent.
    metrics = StreamMetrics()
    hub = Hub(metrics, queue_size=16, sink_of=lambda ws: ws)
    ws = FakeSocket()
    conn = hub.open(ws, None, "ws", "k1", "ses_a", cursors=True, replaying=True)
    facts = FilterFacts.of("de-DE", (), ())
    for offset, lang in ((1869, "de-DE"), (1869, "fr-FR")):
        payload = protocol.post_created(f'{{"id":1,"lang":"{lang}"}}', 0, offset)
        hub.publish(payload, facts, payload, (0, offset, lang), "e1")
    hub.skip_live(conn, {0: (1869, "de-DE")})  # the replay read the cursor: it holds 0:1869 de-DE
    await hub.go_live(conn)
    for _ in range(5):
        await asyncio.sleep(0)
    got = [(m["log_position"], m["data"]["lang"]) for m in map(orjson.loads, ws.messages)]
    assert got == [("0:1869", "fr-FR")]
    assert metrics.registry.get_sample_value("tickerwire_stream_repeats_dropped_total") == 0
    await hub.forget(conn)
