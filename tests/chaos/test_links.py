"""The nemesis's network link (tests/support/links.py) against an echo server: it forwards, a
slowed link answers late by the delay each way, a cut drops what is open and holds what comes
until healed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator

import pytest

from tests.support.links import Link


@contextlib.asynccontextmanager
async def echo_link() -> AsyncIterator[Link]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    link = Link(f"127.0.0.1:{port}")
    link.start()
    try:
        yield link
    finally:
        link.stop()
        server.close()


async def round_trip(link: Link, payload: bytes = b"ping") -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
    try:
        started = time.monotonic()
        writer.write(payload)
        assert await asyncio.wait_for(reader.readexactly(len(payload)), 5) == payload
        return time.monotonic() - started
    finally:
        writer.close()


async def test_a_link_forwards_and_a_slowed_one_answers_late_by_its_delay_each_way():
    async with echo_link() as link:
        assert await round_trip(link) < 0.2
        link.slow(0.3)
        assert 0.6 <= await round_trip(link) < 1.5
        link.heal()
        assert await round_trip(link) < 0.2


async def test_a_cut_drops_open_connections_and_holds_new_ones_until_healed():
    async with echo_link() as link:
        reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
        writer.write(b"a")
        assert await reader.readexactly(1) == b"a"
        link.cut()
        assert await asyncio.wait_for(reader.read(10), 5) == b""  # dropped
        writer.close()

        held = asyncio.ensure_future(round_trip(link, b"held"))
        await asyncio.sleep(0.5)
        assert not held.done()  # connected, but nothing gets through
        link.heal()
        assert await asyncio.wait_for(held, 5) < 5


@pytest.mark.parametrize("cut", [False, True])
async def test_a_stopped_link_refuses_connections(cut: bool):
    async with echo_link() as link:
        if cut:
            link.cut()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", link.port)


def test_a_link_never_started_stops_quietly():
    link = Link("127.0.0.1:9")
    link.stop()
    link.stop()
