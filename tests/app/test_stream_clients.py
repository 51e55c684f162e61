"""Real clients decode every message of the stream's prepared frames, compressed and not:
Node's ``ws`` (deflate offered, its default, and not), Python's ``websockets`` (its default
offer, an offer of a 10-bit server window, no offer) and aiohttp's client (deflate and
not, one with resume cursors) are connected to one stream at once; each gets every post, with
the same ``data`` byte for byte, and the stream built each post's frame once per encoding and
history, not once per connection. Then a long mixed sequence: frequent ``ping`` messages
between the posts, a filtered connection, clients asking for ``server_no_context_takeover``
and for 9- and 10-bit windows, a connection resuming with a cursor while posts go live; with
context takeover, each frame is compressed after the connection's previous message, and every
client inflates every message. The Node clients skip, naming it, without node and ``ws``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import string

import aiohttp
import orjson
import pytest
import websockets
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

from tests.support.apps import ReadModel, config_for, stream_served
from tests.support.events import locale_ev, post_ev
from tests.support.fieldtools import node_modules_with
from tests.support.stack import BASE
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.services.cli.publish import publish

POSTS = 40

#: argv: url, posts expected, "deflate", "plain", "notakeover" (deflate, asking for
#: server_no_context_takeover) or "window9" (deflate, asking for a 9-bit server window). Prints
#: the negotiated extensions once ready, then one JSON line of every post.created payload as received.
NODE_CLIENT = """
const WebSocket = require('ws');
const [url, expect, mode] = process.argv.slice(1);
const deflate = {deflate: true, plain: false, notakeover: {serverNoContextTakeover: true}, window9: {serverMaxWindowBits: 9}};
const ws = new WebSocket(url, {perMessageDeflate: deflate[mode]});
const got = [];
let extensions = null;
ws.on('upgrade', (res) => { extensions = res.headers['sec-websocket-extensions'] || null; });
ws.on('message', (data, isBinary) => {
  const text = data.toString();
  const type = JSON.parse(text).type;
  if (type === 'ready') console.log(JSON.stringify({ready: true, extensions}));
  if (type !== 'post.created') return;
  got.push(text);
  if (got.length >= Number(expect)) { console.log(JSON.stringify({got})); ws.close(); }
});
ws.on('error', (err) => { console.error(String(err)); process.exit(1); });
"""


class Client:
    """One client: ``ready`` resolves with the Sec-WebSocket-Extensions answer once it has its
    ready message; ``done`` with every post.created payload it received (``got``, as they come)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task | None = None
        self.got: list[bytes] = []

    async def done(self) -> list[bytes]:
        assert self.task is not None
        return await asyncio.wait_for(self.task, 60)


def aiohttp_client(url: str, compress: int, cursors: bool = False, expect: int = POSTS, query: str = "") -> Client:
    client = Client(f"aiohttp compress={compress}{query}" + (" cursors" if cursors else ""))
    url += query
    if cursors:
        url += "&cursors=true"

    async def run() -> list[bytes]:
        got = client.got
        async with aiohttp.ClientSession() as session, session.ws_connect(url, compress=compress) as ws:
            async for msg in ws:
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                if msg.data.startswith('{"type":"ready"'):
                    client.ready.set_result("permessage-deflate" if ws.compress else None)
                elif msg.data.startswith('{"type":"post.created"'):
                    got.append(msg.data.encode())
                    if len(got) == expect:
                        return got
        return got

    client.task = asyncio.create_task(run())
    return client


def websockets_client(url: str, window: int | None | bool, notakeover: bool = False, expect: int = POSTS) -> Client:
    """``window``: True for the library's default offer, an int for a server window of that many
    bits, None for no offer; ``notakeover``: asking for server_no_context_takeover."""
    client = Client(
        f"websockets window={window}" + (" notakeover" if notakeover else "") + (" resume" if "resume=" in url else "")
    )
    if window is True:
        options: dict = {}
    elif window is None:
        options = {"compression": None}
    else:
        options = {
            "compression": None,
            "extensions": [
                ClientPerMessageDeflateFactory(
                    server_max_window_bits=window, client_max_window_bits=True, server_no_context_takeover=notakeover
                )
            ],
        }

    async def run() -> list[bytes]:
        got = client.got
        async with websockets.connect(url, **options) as ws:
            while len(got) < expect:
                message = await ws.recv()
                assert isinstance(message, str)
                if message.startswith('{"type":"ready"'):
                    client.ready.set_result(ws.response.headers.get("Sec-WebSocket-Extensions"))
                elif message.startswith('{"type":"post.created"'):
                    got.append(message.encode())
        return got

    client.task = asyncio.create_task(run())
    return client


def node_client(url: str, mode: str, expect: int = POSTS) -> Client:
    client = Client(f"node ws {mode}")

    async def run() -> list[bytes]:
        proc = await asyncio.create_subprocess_exec(
            "node",
            "-e",
            NODE_CLIENT,
            url,
            str(expect),
            mode,
            env={**os.environ, "NODE_PATH": str(node_modules_with("ws"))},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 24,  # every post on one line
        )
        try:
            assert proc.stdout is not None
            first = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
            client.ready.set_result(first["extensions"])
            last = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
            assert await asyncio.wait_for(proc.wait(), 30) == 0
            return [text.encode() for text in last["got"]]
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    client.task = asyncio.create_task(run())
    return client


async def built(admin_url: str) -> dict[str, float]:
    """tickerwire_stream_frames_built_total by encoding."""
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url}/metrics") as resp:
        text = await resp.text()
    return {
        m[1]: float(m[2])
        for m in re.finditer(r'^tickerwire_stream_frames_built_total\{encoding="([^"]+)"\} (\S+)$', text, re.M)
    }


@pytest.mark.parametrize("node", [True, False], ids=["with-node", "python-only"])
async def test_every_client_decodes_every_prepared_frame_compressed_and_not(pg_dsn, kafka_bootstrap, node):
    if node:
        node_modules_with("ws")  # skip before starting anything
    prefix = f"clients{os.getpid()}{int(node)}"
    # Posts of every size a partner sees, up to ledes longer than a 10-bit deflate window; the
    # first repeats 800 bytes from 1,100 bytes back, beyond a 10-bit window (that the frame for
    # such a window never reaches back that far is checked in tests/unit/test_stream_frames.py:
    # these clients would inflate it anyway).
    rng = random.Random(38)
    repeated = "".join(rng.choice(string.ascii_letters + " ") for _ in range(1100))
    posts = [post_ev(1, lede=repeated + repeated[:800])] + [
        post_ev(
            n,
            title=f"Post {n} " + "market update " * (n * 7 % 30),
            lede=" ".join(f"w{n * i % 997}" for i in range(1, 2 + n * 13 % 380)),
            tickers=("BTC", "ETH")[: 1 + n % 2],
        )
        for n in range(2, POSTS + 1)
    ]
    settings = dict(topic_posts_partitions=1)
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn, prefix)
        await model.project([locale_ev("en-US", default=True)])
        key = await model.provision("ws_clients", stream_connection_limit=20)
        async with stream_served(dsn, kafka_bootstrap, prefix, **settings) as stream:
            url = f"{stream.url.replace('http', 'ws', 1)}{BASE}/stream?key={key}"
            clients = [
                aiohttp_client(url, 15),
                aiohttp_client(url, 0),
                aiohttp_client(url, 15, cursors=True),
                websockets_client(url, True),
                websockets_client(url, 10),
                websockets_client(url, None),
            ]
            if node:
                clients += [node_client(url, "deflate"), node_client(url, "plain")]
            answers = {c.name: await asyncio.wait_for(c.ready, 60) for c in clients}
            before = await built(stream.admin_url)
            await publish(
                config_for(dsn, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, **settings), posts
            )
            await model.project(posts)
            received = {c.name: await c.done() for c in clients}
            after = await built(stream.admin_url)
    for name, answer in answers.items():
        deflate = not any(mark in name for mark in ("compress=0", "window=None", "plain"))
        if deflate and not name.startswith("aiohttp"):  # aiohttp's client does not show the header
            assert answer is not None and "server_no_context_takeover" not in answer, (name, answer)
        assert (answer is not None) == deflate, (name, answer)
    assert "server_max_window_bits=10" in answers["websockets window=10"]
    expected = [orjson.loads(p)["data"] for p in received["aiohttp compress=0"]]
    assert [d["id"] for d in expected] == list(range(1, POSTS + 1))
    for name, payloads in received.items():
        docs = [orjson.loads(p) for p in payloads]
        assert [d["data"] for d in docs] == expected, name  # every post, in order, the same data
        assert all(("cursor" in d) == name.endswith("cursors") for d in docs), name
    grown = {encoding: after.get(encoding, 0) - before.get(encoding, 0) for encoding in after}
    # Each post once per encoding in use (plain, 15-bit and 10-bit windows), with and without a
    # cursor for the 15-bit window (the cursor client's), each after the post before it (the
    # first alone: each connection's previous message was its own ready): never once per connection.
    assert grown["plain"] == POSTS
    assert grown["deflate-10"] == POSTS
    assert grown["deflate-15"] == 2 * POSTS


MIXED = 60
#: The first post a resuming client's cursor is after.
RESUME_AFTER = 10


def mixed_posts() -> list:
    """Posts of every size, some longer than a 9- or 10-bit window, one in three about ETH only."""
    rng = random.Random(7692)
    return [
        post_ev(
            n,
            title=f"Post {n} " + "market update " * rng.randrange(30),
            lede=" ".join(f"w{rng.randrange(997)}" for _ in range(rng.randrange(1, 400))),
            tickers=("ETH",) if n % 3 == 0 else ("BTC",),
        )
        for n in range(1, MIXED + 1)
    ]


async def test_every_client_inflates_a_long_mixed_sequence_with_context_takeover(pg_dsn, kafka_bootstrap):
    try:
        node_modules_with("ws")
        node = True
    except pytest.skip.Exception:  # the Python clients still run
        node = False
    prefix = f"mixed{os.getpid()}"
    posts = mixed_posts()
    eth = [p.data.id for p in posts if "ETH" in p.data.tickers]
    # A ping every 50 ms: pings fall between the posts, between a connection's ready and its
    # first post, between a resume's replay and its live posts.
    settings = dict(topic_posts_partitions=1, stream_ping_interval_s=0.05)
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn, prefix)
        await model.project([locale_ev("en-US", default=True)])
        key = await model.provision("ws_mixed", stream_connection_limit=30)
        config = config_for(dsn, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, **settings)
        async with stream_served(dsn, kafka_bootstrap, prefix, **settings) as stream:
            url = f"{stream.url.replace('http', 'ws', 1)}{BASE}/stream?key={key}"
            cursored = aiohttp_client(url, 15, cursors=True, expect=MIXED)
            clients = [
                aiohttp_client(url, 15, expect=MIXED),
                aiohttp_client(url, 0, expect=MIXED),
                cursored,
                aiohttp_client(url, 15, expect=len(eth), query="&tickers=ETH"),
                websockets_client(url, True, expect=MIXED),
                websockets_client(url, 10, expect=MIXED),
                websockets_client(url, 9, expect=MIXED),
                websockets_client(url, 15, notakeover=True, expect=MIXED),
                websockets_client(url, 10, notakeover=True, expect=MIXED),
                websockets_client(url, None, expect=MIXED),
            ]
            if node:
                clients += [node_client(url, mode, MIXED) for mode in ("deflate", "plain", "notakeover", "window9")]
            answers = {c.name: await asyncio.wait_for(c.ready, 60) for c in clients}
            half = MIXED // 2
            await publish(config, posts[:half])
            await model.project(posts[:half])
            async with asyncio.timeout(60):
                while len(cursored.got) < half:
                    await asyncio.sleep(0.05)
            # Resumes while the second half goes live: its replay is its own, its live posts shared.
            cursor = orjson.loads(cursored.got[RESUME_AFTER - 1])["cursor"]
            resume = f"&resume={cursor}"
            resumers = [
                aiohttp_client(url, 15, cursors=True, expect=MIXED - RESUME_AFTER, query=resume),
                websockets_client(url + resume + "&cursors=true", 9, expect=MIXED - RESUME_AFTER),
            ]
            await publish(config, posts[half:])
            await model.project(posts[half:])
            received = {c.name: await c.done() for c in clients + resumers}
    for name, answer in answers.items():
        if answer is not None and not name.startswith("aiohttp"):  # aiohttp's client does not show the header
            assert ("server_no_context_takeover" in answer) == ("notakeover" in name), (name, answer)
    assert "server_max_window_bits=9" in answers["websockets window=9"]
    expected = {orjson.loads(p)["data"]["id"]: orjson.loads(p)["data"] for p in received["aiohttp compress=0"]}
    assert list(expected) == list(range(1, MIXED + 1))
    for name, payloads in received.items():
        ids = eth if "tickers=ETH" in name else list(range(RESUME_AFTER + 1 if "resume" in name else 1, MIXED + 1))
        assert [orjson.loads(p)["data"] for p in payloads] == [expected[i] for i in ids], name
