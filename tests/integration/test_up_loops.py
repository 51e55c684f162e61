"""The loops of `tickerwire up` in process: the demo trickle waits longer while the broker is
away and is back to its short pause once a post went out (real broker; the bootstrap address
refuses connections until it forwards to the broker); waiting for readiness is bounded even
when a listener never answers (a real loopback socket)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.forward import Forwarder
from tests.support.wait import background, until
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.cli.up.children import Child, PortTaken, Probe, wait_healthy
from tickerwire.services.cli.up.demo import Trickle
from tickerwire.services.common import kafka


async def test_the_trickles_pause_is_short_again_after_a_post_went_out(kafka_bootstrap):
    prefix = f"trickle{os.getpid()}"
    settings = dict(database_url="postgresql://unused/x", topic_prefix=prefix, topic_replication_factor=1)
    await kafka.ensure_topics(FullConfig(kafka_bootstrap_servers=kafka_bootstrap, **settings))
    async with Forwarder(kafka_bootstrap) as forwarder:
        trickle = Trickle(FullConfig(kafka_bootstrap_servers=forwarder.address, **settings), next_id=1, interval=0.05)
        async with background(trickle.run_forever()):
            await until(lambda: trickle.backoff.failures >= 2, 30, "two failed publishes")
            assert trickle.backoff.ceiling >= 4.0
            await forwarder.open()  # the broker is back
            await until(lambda: trickle.next_id > 1, 60, "a post published")
            assert trickle.backoff.ceiling == 1.0


async def test_waiting_for_readiness_gives_up_at_its_deadline_when_a_listener_never_answers():
    async def accept_and_say_nothing(reader, writer):
        await reader.read()  # until the client gives up

    server = await asyncio.start_server(accept_and_say_nothing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        async with asyncio.timeout(30):  # aiohttp alone would wait 5 minutes on the first probe
            with pytest.raises(TimeoutError, match="did not become ready"):
                await wait_healthy(
                    [Probe(Child("api", {}, Path("api.log")), f"http://127.0.0.1:{port}/readyz", port)], [], timeout=1.0
                )
        assert time.monotonic() - started < 5
    finally:
        server.close()


async def test_a_child_that_exits_at_start_is_reported_at_once_with_its_logs_last_line(tmp_path):
    child = Child("api", {}, tmp_path / "api.log")
    with open(child.log_path, "wb") as log:
        child.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "print('starting'); print('api: cannot listen on 127.0.0.1:8080: Address already in use'); "
                "raise SystemExit(1)",
            ],
            stdout=log,
        )
    started = time.monotonic()
    with pytest.raises(
        PortTaken, match=r"the api exited at start-up with status 1: api: cannot listen on 127.0.0.1:8080"
    ):
        await wait_healthy([Probe(child, "http://127.0.0.1:9/readyz", 9)], [child], timeout=30)
    assert time.monotonic() - started < 5


async def test_an_answer_from_another_process_on_the_childs_port_is_not_taken_for_the_childs(tmp_path):
    async def ok(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(ok, "127.0.0.1", 0)  # this test process holds the port, not the child
    port = server.sockets[0].getsockname()[1]
    child = Child("api", {}, tmp_path / "api.log")
    child.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(
            PortTaken, match=f"answered by another process, not by this up's api .*port {port} was taken"
        ):
            await wait_healthy([Probe(child, f"http://127.0.0.1:{port}/readyz", port)], [child], timeout=10)
    finally:
        child.proc.kill()
        child.proc.wait()
        server.close()
