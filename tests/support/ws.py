"""WebSocket handshakes against the stream, shared by the in-process and the end-to-end tests."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from typing import AsyncIterator, Counter

import aiohttp
import orjson
import pytest

#: Generous upper bound for a first message to arrive (a failure, not a measurement).
WAIT = 30.0


def upgrade_headers() -> dict[str, str]:
    """The headers of a WebSocket upgrade request, for sending one with a plain HTTP client."""
    return {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
    }


async def accepted(
    http: aiohttp.ClientSession, url: str, headers=None, **options
) -> tuple[aiohttp.ClientWebSocketResponse, dict]:
    """A connection that the stream accepted, and its first message, which is ``ready``
    (``options`` go to ``ws_connect``)."""
    ws = await http.ws_connect(url, headers=headers or {}, **options)
    try:
        ready = orjson.loads((await ws.receive(timeout=WAIT)).data)
        assert ready["type"] == "ready", ready
    except BaseException:
        await ws.close()
        raise
    return ws, ready


async def handshake(http: aiohttp.ClientSession, url: str, headers=None) -> aiohttp.ClientWebSocketResponse:
    """A connection that the stream accepted: its first message is ``ready``."""
    return (await accepted(http, url, headers))[0]


@contextlib.asynccontextmanager
async def session(
    http: aiohttp.ClientSession, url: str, headers=None
) -> AsyncIterator[tuple[aiohttp.ClientWebSocketResponse, dict]]:
    """:func:`accepted` for the length of a block, closed after it."""
    ws, ready = await accepted(http, url, headers)
    try:
        yield ws, ready
    finally:
        await ws.close()


async def refusal(http: aiohttp.ClientSession, url: str, headers=None) -> tuple[int, dict]:
    """A refused handshake answers with a JSON envelope and no upgrade: (status, body)."""
    with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
        await http.ws_connect(url, headers=headers or {})
    status = exc.value.status
    async with http.get(url, headers={**(headers or {}), **upgrade_headers()}) as resp:
        assert resp.status == status and resp.content_type == "application/json"
        return status, await resp.json()


async def _count_pushes(ws: aiohttp.ClientWebSocketResponse, pushed: Counter, cursor: list[str]) -> None:
    """Count each ``post.created`` by post id into ``pushed``; keep the last cursor seen in ``cursor``."""
    async for message in ws:
        if message.type != aiohttp.WSMsgType.TEXT:
            continue
        doc = orjson.loads(message.data)
        if doc["type"] == "post.created":
            pushed[doc["data"]["id"]] += 1
        if doc.get("cursor"):
            cursor[:] = [doc["cursor"]]


async def _follow_resuming(http: aiohttp.ClientSession, url: str, pushed: Counter) -> None:
    """Connect with cursors and, whenever the connection drops, resume from the last cursor."""
    cursor: list[str] = []
    while True:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
            resume = f"&resume={cursor[0]}" if cursor else ""
            async with session(http, f"{url}&cursors=true{resume}") as (ws, _):
                await _count_pushes(ws, pushed, cursor)
        await asyncio.sleep(0.5)


@contextlib.asynccontextmanager
async def _cancelled_after(task: asyncio.Task) -> AsyncIterator[None]:
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def counting_pushes(
    http: aiohttp.ClientSession, url: str, pushed: Counter, *, resuming: bool = False
) -> AsyncIterator[None]:
    """A stream connection to ``url`` for the length of the block, counting the posts pushed by
    id into ``pushed``. Plain: accepted before the block starts, and never reconnected (a drop
    shows as posts missing). ``resuming``: reconnects whenever it drops, resuming with its
    cursor (so a drop shows as nothing missing and nothing doubled)."""
    if resuming:
        async with _cancelled_after(asyncio.create_task(_follow_resuming(http, url, pushed))):
            yield
        return
    async with session(http, url) as (ws, _):
        async with _cancelled_after(asyncio.create_task(_count_pushes(ws, pushed, []))):
            yield
