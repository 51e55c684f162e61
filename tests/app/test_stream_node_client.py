"""Node's ``ws``, the WebSocket client most JavaScript partners use, against a real stream: it
offers permessage-deflate by default, and gets it exactly when TICKERWIRE_STREAM_COMPRESS is on
(the default is in docs/operations.md and schemas/asyncapi.json), then reads the stream's
``ready`` message through it. Skips, naming it, without node and the ws package (.ci/run
installs them)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from tests.support.apps import ReadModel, stream_served
from tests.support.events import locale_ev
from tests.support.fieldtools import node_modules_with
from tests.support.stack import BASE
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.services.cli.settings import FullConfig

#: Connects as a partner would (ws's defaults: permessage-deflate offered), prints what the
#: server answered in Sec-WebSocket-Extensions and the first message, then closes.
CLIENT = """
const WebSocket = require('ws');
const ws = new WebSocket(process.argv[1]);
let extensions = null;
ws.on('upgrade', (res) => { extensions = res.headers['sec-websocket-extensions'] || null; });
ws.on('message', (data) => {
  console.log(JSON.stringify({extensions, negotiated: Object.keys(ws._extensions), message: JSON.parse(data.toString())}));
  ws.close();
});
ws.on('error', (err) => { console.error(String(err)); process.exit(1); });
"""


async def node_client(url: str) -> dict:
    modules = node_modules_with("ws")
    proc = await asyncio.create_subprocess_exec(
        "node",
        "-e",
        CLIENT,
        url,
        env={**os.environ, "NODE_PATH": str(modules)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("compress", [True, False, None], ids=["on", "off", "default"])
async def test_node_ws_gets_permessage_deflate_exactly_when_the_stream_offers_it(pg_dsn, kafka_bootstrap, compress):
    node_modules_with("ws")  # skip before starting anything
    prefix = f"nodews{os.getpid()}"
    overrides = {} if compress is None else {"stream_compress": compress}
    expected = FullConfig.__dataclass_fields__["stream_compress"].default if compress is None else compress
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn, prefix)
        await model.project([locale_ev("en-US", default=True)])
        key = await model.provision("ws_nodews")
        async with stream_served(dsn, kafka_bootstrap, prefix, **overrides) as stream:
            got = await node_client(f"{stream.url.replace('http', 'ws', 1)}{BASE}/stream?key={key}")
    assert got["message"]["type"] == "ready"
    if expected:
        assert got["extensions"] is not None and got["extensions"].startswith("permessage-deflate"), got
        assert got["negotiated"] == ["permessage-deflate"]
    else:
        assert got["extensions"] is None and got["negotiated"] == [], got
