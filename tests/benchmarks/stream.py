"""3. Stream fan-out: 1,000 and 5,000 WebSocket clients held by separate client processes;
deliveries/s and publish-to-receive p50/p99 for a burst of posts, against a bare aiohttp
broadcast server sending pre-encoded bytes to the same clients. The product runs twice per
size, the clients offering permessage-deflate or not (the stream runs with
TICKERWIRE_STREAM_COMPRESS on, the default, so it is negotiated when offered): the stream process's bytes
written and CPU time per delivery, side by side.

Every figure is reported per deflate offer: deliveries/s and p50/p99 against the baseline, the
stream's bytes written, CPU time and RSS growth per delivery or per 1,000 connections, and the
share of deliveries written as a frame already built for another connection (prepared frames).

Product path: produce to the log -> projector commits -> stream announces -> clients.
Baseline: ``POST /publish`` of the same number of pre-encoded messages -> clients.
Deliveries/s = receipts / (last receipt - first publish). Times are CLOCK_MONOTONIC,
which every process on the machine shares.

``python -m tests.benchmarks.stream client URL CONNECTIONS EXPECT TIMEOUT [COMPRESS]`` is one
client process: it prints ``ready N D`` once connected (N: the handshakes it had to retry, D: the
connections on which permessage-deflate was negotiated), then one JSON line of [post id,
receive time] pairs. COMPRESS: the window bits it offers (0, the default: no offer).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import aiohttp
import orjson

from tests.support.stack import BASE
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka
from tickerwire.services.common.runtime.retry import backoff_delays

from .common import (
    REPO,
    Context,
    Result,
    RssSampler,
    baseline_process,
    catalog,
    percentile,
    posts,
    proc_rss_mb,
    provision_wide_open,
    raise_nofile,
)

NAME = "stream"

#: Connections the stream's listener admits beyond the largest client count (a readiness probe,
#: a client reconnecting).
CONNECTION_MARGIN = 100


# --------------------------------------------------------------------------- client process


async def client_main(url: str, connections: int, expect: int, timeout: float, compress: int = 0) -> None:
    raise_nofile()
    receipts: list[tuple[int, float]] = []
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    gate = asyncio.Semaphore(50)

    retried = 0
    deadline = time.monotonic() + timeout

    async def connect() -> aiohttp.ClientWebSocketResponse:
        """As a partner's client does: a refused handshake (503: the stream could not take the
        workspace's slot in time; 429) is retried after the project's capped, jittered pause."""
        nonlocal retried
        delays = backoff_delays(0.1, 2.0)
        while True:
            try:
                async with gate:
                    return await session.ws_connect(url, autoping=True, max_msg_size=0, compress=compress)
            except aiohttp.WSServerHandshakeError as exc:
                if exc.status not in (429, 503) or time.monotonic() > deadline:
                    raise
                retried += 1
                await asyncio.sleep(next(delays))

    sockets = await asyncio.gather(*(connect() for _ in range(connections)))
    print(f"ready {retried} {sum(1 for ws in sockets if ws.compress)}", flush=True)

    async def read(ws: aiohttp.ClientWebSocketResponse) -> None:
        got = 0
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT or not msg.data.startswith('{"type":"post.created"'):
                continue
            receipts.append((orjson.loads(msg.data)["data"]["id"], time.monotonic()))
            got += 1
            if got >= expect:
                return

    await asyncio.wait([asyncio.create_task(read(ws)) for ws in sockets], timeout=timeout)
    sys.stdout.write(json.dumps(receipts) + "\n")
    sys.stdout.flush()
    for ws in sockets:
        await ws.close()
    await session.close()


# --------------------------------------------------------------------------- driver


class Clients:
    """Client processes holding ``total`` connections between them."""

    def __init__(self, url: str, total: int, expect: int, processes: int, timeout: float, compress: int = 0) -> None:
        self.timeout = timeout
        self.deflated = 0  # connections with permessage-deflate, once ready
        per = [total // processes + (1 if i < total % processes else 0) for i in range(processes)]
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.benchmarks.stream",
                    "client",
                    url,
                    str(n),
                    str(expect),
                    str(timeout),
                    str(compress),
                ],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            for n in per
            if n
        ]

    async def _line(self, p: subprocess.Popen, what: str) -> str:
        """A client's next line; a client silent past its own timeout (and a margin) is killed,
        with the others, and the benchmark fails naming what it waited for."""
        try:
            return await asyncio.wait_for(asyncio.to_thread(p.stdout.readline), self.timeout + 60)
        except asyncio.TimeoutError:
            for q in self.procs:
                q.kill()
            raise RuntimeError(f"stream client {p.pid} sent no {what} within {self.timeout + 60:.0f} s") from None

    async def ready(self) -> int:
        """Wait until every client process holds its connections; returns the handshakes they
        retried on the way."""
        retried = 0
        for p in self.procs:
            line = await self._line(p, "ready line")
            if not line.startswith("ready "):
                raise RuntimeError(f"stream client failed to connect (exit {p.poll()})")
            retried += int(line.split()[1])
            self.deflated += int(line.split()[2])
        return retried

    async def receipts(self) -> list[tuple[int, float]]:
        """Every client's receipts, once each has printed them (before its connections close)."""
        out = []
        for p in self.procs:
            line = await self._line(p, "receipts")
            out.extend(json.loads(line) if line.strip() else [])
        return out

    async def finish(self) -> None:
        """Wait until the client processes have closed their connections and exited."""
        for p in self.procs:
            await asyncio.to_thread(p.wait, 30)


def process_counters(pid: int) -> tuple[int, float]:
    """Bytes a process has written (write and send calls, sockets included) and its CPU seconds."""
    with open(f"/proc/{pid}/io") as io:
        written = next(int(line.split()[1]) for line in io if line.startswith("wchar:"))
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return written, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def figures(receipts, sent: dict[int, float]) -> tuple[float, float, float]:
    lat = [(t - sent[i]) * 1000 for i, t in receipts if i in sent]
    if not lat:
        raise RuntimeError("no client received anything")
    span = max(t for _, t in receipts) - min(sent.values())
    return len(lat) / span, percentile(lat, 50), percentile(lat, 99)


async def stored_lean(stack, post_id: int) -> bytes:
    """The lean JSON the product sent, so the baseline sends messages of the same size."""
    conn = await stack.read_conn()
    try:
        return (await conn.fetchval("SELECT lean FROM post_translations WHERE post_id = $1", post_id)).encode()
    finally:
        await conn.close()


def template_message(post_id: int, lean: bytes) -> bytes:
    doc = orjson.loads(lean)
    doc["id"] = post_id
    return b'{"type":"post.created","ts":"2026-01-01T00:00:00.000Z","data":' + orjson.dumps(doc) + b"}"


async def frame_counters(admin_url: str) -> tuple[float, float]:
    """The stream's frames built (every encoding) and messages written (every type) so far."""
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url}/metrics") as resp:
        text = await resp.text()
    built = sent = 0.0
    for line in text.splitlines():
        if line.startswith("tickerwire_stream_frames_built_total{"):
            built += float(line.rsplit(" ", 1)[1])
        elif line.startswith("tickerwire_stream_messages_sent_total{"):
            sent += float(line.rsplit(" ", 1)[1])
    return built, sent


class Phase:
    """The figures of one size and one deflate offer (``on``: the clients offer it)."""

    def __init__(self, result: Result, size: int, offer: str) -> None:
        large, deflated = size >= 5000, offer == "on"
        name, tail = f"{size} clients", f", deflate {offer}"
        floor = 1.5 if large and deflated else 0.7
        self.rate = result.metric(
            f"{name} deliveries/s{tail}",
            "msg/s",
            target=f">= {floor}x baseline",
            check=lambda p, r: r is not None and r >= floor,
        )
        self.p50 = result.metric(f"{name} publish-to-receive p50{tail}", "ms", higher_is_better=False)
        self.p99 = self._at_most(result, f"{name} publish-to-receive p99{tail}", "ms", 250 if large else None, "<")
        self.bytes = self._at_most(result, f"{name} bytes written per delivery{tail}", "B", 230 if deflated else None)
        self.cpu = result.metric(f"{name} stream CPU per delivery{tail}", "us", higher_is_better=False)
        self.rss = self._at_most(
            result, f"{name} stream RSS per 1,000 connections{tail}", "MB", 15 if deflated else None
        )
        self.prepared = result.metric(f"{name} deliveries written as an already built frame{tail}", "%")

    @staticmethod
    def _at_most(result: Result, name: str, unit: str, bound: float | None, op: str = "<="):
        """A lower-is-better metric, with the target ``op bound`` when ``bound`` is given."""
        if bound is None:
            return result.metric(name, unit, higher_is_better=False)
        strict = op == "<"
        return result.metric(
            name,
            unit,
            higher_is_better=False,
            target=f"{op} {bound} {unit}",
            check=lambda p, r: p < bound if strict else p <= bound,
        )


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    sizes = s.pick([50], [1000, 5000])
    burst = s.pick(3, 10)
    procs = s.pick(2, 4)
    timeout = s.pick(30.0, 90.0)
    result.notes.append(
        "permessage-deflate: the stream runs with TICKERWIRE_STREAM_COMPRESS on; each size is measured with clients "
        "that do not offer it (deflate off) and with clients that do (deflate on, 15-bit windows, context takeover: "
        "aiohttp's offer). The stream compresses each message once per window size and previous message (after the "
        "post before it; the first post after a connection's own ready alone), then writes the same frame to every "
        "connection that shares them (services/stream/frames.py). Bytes: the stream process's write "
        "calls (/proc/PID/io wchar) per delivery; CPU: its user + system time per delivery; already built frame: "
        "1 - frames built / messages written (tickerwire_stream_frames_built_total, tickerwire_stream_messages_sent_total)"
    )
    result.notes.append(
        f"burst of {burst} one-locale posts per run; {procs} client processes; product path includes log + projector + stream; "
        f"stream started with TICKERWIRE_MAX_CONNECTIONS={max(sizes) + CONNECTION_MARGIN}; the baseline (a bare aiohttp "
        "broadcast of pre-encoded messages, uncompressed) is the same for both deflate offers"
    )
    next_id = 1
    retried: dict[int, int] = {}
    async with ctx.stack() as stack:
        projector = await stack.start("projector")
        await stack.publish(catalog(tokens=0))
        key = await provision_wide_open(stack)
        # The partner listener's connection bound (TICKERWIRE_MAX_CONNECTIONS, 1,000 by default)
        # is a deployment setting: sized here for the largest run, as a deployment holding that
        # many clients per process would size it (the process fits its fd limit to it).
        server = await stack.start(
            "stream", TICKERWIRE_MAX_CONNECTIONS=str(max(sizes) + CONNECTION_MARGIN), TICKERWIRE_STREAM_COMPRESS="1"
        )
        product_url = server.url.replace("http", "ws") + BASE + f"/stream?key={key}"
        topic = topic_name(stack.topic_prefix, POSTS)
        async with (
            baseline_process("broadcast") as (bproc, base_url),
            kafka.started_producer(stack.config, linger_ms=0) as producer,
        ):
            with RssSampler() as rss:
                rss.watch("stream", server.proc.pid)
                rss.watch("projector", projector.proc.pid)
                for size in sizes:
                    # A smoke run proves the harness with one phase, the compressed one.
                    offers = s.pick(("on",), ("off", "on"))
                    phases = {offer: Phase(result, size, offer) for offer in offers}
                    # Deflate's CPU against plain's, when both were measured (not in a smoke run).
                    cpu_ratio = (
                        result.metric(
                            f"{size} clients stream CPU per delivery, deflate on / off",
                            "x",
                            higher_is_better=False,
                            target="<= 1.1x",
                            check=lambda p, r: p <= 1.1,
                        )
                        if len(offers) == 2
                        else None
                    )
                    per_k = []
                    for _ in range(s.runs):
                        cpu_of: dict[str, float] = {}
                        for offer in offers:  # product, without and then with permessage-deflate offered
                            phase = phases[offer]
                            idle = proc_rss_mb(server.proc.pid)
                            clients = Clients(
                                product_url, size, burst, procs, timeout, compress=15 if offer == "on" else 0
                            )
                            retried[size] = retried.get(size, 0) + await clients.ready()
                            if clients.deflated != (size if offer == "on" else 0):
                                raise RuntimeError(
                                    f"permessage-deflate negotiated on {clients.deflated} of {size} connections (offered: {offer})"
                                )
                            await asyncio.sleep(0.5)
                            growth = (proc_rss_mb(server.proc.pid) - idle) / size * 1000
                            phase.rss.product.append(growth)
                            if offer == offers[0]:
                                per_k.append(growth)
                            events = posts(next_id, burst, locales=("en-US",))
                            next_id += burst
                            sent = {}
                            built, written_messages = await frame_counters(server.admin_url)
                            written, cpu = process_counters(server.proc.pid)
                            for event in events:
                                sent[event.data.id] = time.monotonic()
                                await producer.send(topic, value=encode_event(event), key=entity_key(event).encode())
                            await producer.flush()
                            receipts = await clients.receipts()
                            # Read before the clients close: the closing handshakes are no delivery work.
                            written_after, cpu_after = process_counters(server.proc.pid)
                            built_after, written_messages_after = await frame_counters(server.admin_url)
                            await clients.finish()
                            deliveries = max(1, len(receipts))
                            phase.bytes.product.append((written_after - written) / deliveries)
                            cpu_of[offer] = (cpu_after - cpu) * 1e6 / deliveries
                            phase.cpu.product.append(cpu_of[offer])
                            messages = written_messages_after - written_messages
                            if messages > 0:
                                phase.prepared.product.append(100 * (1 - (built_after - built) / messages))
                            for metric, value in zip((phase.rate, phase.p50, phase.p99), figures(receipts, sent)):
                                metric.product.append(value)
                        if cpu_ratio is not None and cpu_of["off"] > 0:
                            cpu_ratio.product.append(cpu_of["on"] / cpu_of["off"])
                        lean = await stored_lean(stack, events[0].data.id)
                        # baseline
                        clients = Clients(base_url.replace("http", "ws") + "/stream", size, burst, procs, timeout)
                        await clients.ready()
                        await asyncio.sleep(0.5)
                        ids = list(range(10**9, 10**9 + burst))
                        body = b"\n".join(template_message(i, lean) for i in ids)
                        async with aiohttp.ClientSession() as session:
                            t0 = time.monotonic()
                            async with session.post(base_url + "/publish", data=body) as resp:
                                await resp.read()
                        baseline = figures(await clients.receipts(), {i: t0 for i in ids})
                        await clients.finish()
                        for phase in phases.values():
                            for metric, value in zip((phase.rate, phase.p50, phase.p99), baseline):
                                metric.baseline.append(value)
                    ctx.memory.setdefault("stream RSS growth per 1,000 connections", []).extend(per_k)
                    result.notes.append(
                        f"{size} clients: {retried.get(size, 0):,} handshakes refused (503/429) and retried over "
                        f"{s.runs} run(s); one workspace's slots are granted under its lock in PostgreSQL, a process's "
                        "queued handshakes of that workspace together in one statement (services/stream/leases.py)"
                    )
            ctx.record_rss(rss, "stream load: ")
    return result


if __name__ == "__main__" and sys.argv[1:2] == ["client"]:
    asyncio.run(
        client_main(
            sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int((sys.argv[6:7] or ["0"])[0])
        )
    )
