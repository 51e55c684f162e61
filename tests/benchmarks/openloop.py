"""Open-loop (fixed-rate) load generator, run as its own process so it does not share an event
loop with the harness: ``python -m tests.benchmarks.openloop URL --rate R --seconds S [--header H]``.

Request i is due at t0 + i/R whether or not earlier ones were answered (no coordinated omission:
latency counts from the due time). Debian packages wrk, not wrk2, so this is the suite's
fixed-rate generator; to hold thousands of requests per second on a small machine it speaks
HTTP/1.1 itself over raw asyncio connections on uvloop (pre-built request bytes, responses
framed by Content-Length, keep-alive, one request in flight per connection), not through an
HTTP client library. It wakes at most about once a millisecond and sends every request then due
(each one's latency still counts from its own due time, so this coarseness is charged to the
server, never hidden). ``--keys FILE`` (one API key a line) sends request i with key i mod n
as its bearer token, for a load spread over many workspaces. A request due while all ``--max-connections`` connections are busy is
skipped and counted. Prints one JSON line: requests started, skipped, errors, the rate actually
achieved, whether the rate was held, latency percentiles and its own CPU share. The caller must
check ``held``: a generator that could not keep up measured itself, not the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from urllib.parse import urlsplit

#: The rate counts as held when at least this share of the target was started in the window.
HOLD_SHARE = 0.97
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[index]


class _Connection(asyncio.Protocol):
    def __init__(self, load: "_Load") -> None:
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.need: int | None = None
        self.status = 0
        self.due = 0.0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.need is None:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end])
                self.status = int(head[9:12])
                m = _LENGTH.search(head)
                self.need = end + 4 + (int(m.group(1)) if m else 0)
            if len(self.buf) < self.need:
                return
            del self.buf[: self.need]
            self.need = None
            self.load.answered(self)

    def connection_lost(self, exc) -> None:
        self.load.lost(self)


class _Load:
    def __init__(self, requests: list[bytes]) -> None:
        self.requests = requests
        self.idle: list[_Connection] = []
        self.busy: set[_Connection] = set()
        self.latencies: list[float] = []
        self.errors = 0

    def send(self, conn: _Connection, due: float, i: int) -> None:
        conn.due = due
        self.busy.add(conn)
        assert conn.transport is not None
        conn.transport.write(self.requests[i % len(self.requests)])

    def answered(self, conn: _Connection) -> None:
        self.latencies.append((time.perf_counter() - conn.due) * 1000)
        if conn.status != 200:
            self.errors += 1
        self.busy.discard(conn)
        self.idle.append(conn)

    def lost(self, conn: _Connection) -> None:
        if conn in self.busy:
            self.busy.discard(conn)
            self.errors += 1
        if conn in self.idle:
            self.idle.remove(conn)


async def generate(
    url: str, headers: dict[str, str], rate: float, seconds: float, max_connections: int, keys: list[str] | None = None
) -> dict:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    load = _Load(
        [
            ("\r\n".join([*lines, *([f"Authorization: Bearer {key}"] if key else [])]) + "\r\n\r\n").encode()
            for key in (keys or [None])
        ]
    )
    loop = asyncio.get_running_loop()

    async def connect() -> _Connection:
        _, conn = await loop.create_connection(lambda: _Connection(load), host, port)
        return conn

    opened = [await connect() for _ in range(min(max_connections, max(8, int(rate / 100))))]
    load.idle.extend(opened)
    total = max(1, int(rate * seconds))
    skipped = late = started = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    i = 0
    while i < total:
        now = time.perf_counter()
        while i < total and t0 + i / rate <= now:
            due = t0 + i / rate
            if now - due > 0.001:
                late += 1
            if load.idle:
                load.send(load.idle.pop(), due, i)
                started += 1
            elif len(load.idle) + len(load.busy) < max_connections:
                conn = await connect()
                load.send(conn, due, i)
                started += 1
            else:
                skipped += 1
            i += 1
        if i < total:  # timers have about 1 ms resolution: a shorter sleep would spin the CPU
            await asyncio.sleep(max(0.001, t0 + i / rate - time.perf_counter()))
    send_wall = time.perf_counter() - t0
    deadline = time.perf_counter() + 10
    while load.busy and time.perf_counter() < deadline:
        await asyncio.sleep(0.005)
    unanswered = len(load.busy)
    cpu = time.process_time() - cpu0
    for conn in [*load.idle, *load.busy]:
        if conn.transport is not None:
            conn.transport.close()
    achieved = started / send_wall if send_wall else 0.0
    return {
        "target_rate": rate,
        "achieved_rate": achieved,
        "requests": started,
        "skipped": skipped,
        "late_share": late / total,
        "errors": load.errors + unanswered,
        "unanswered": unanswered,
        "held": started >= HOLD_SHARE * total and achieved >= HOLD_SHARE * rate and skipped == 0,
        "p50_ms": percentile(load.latencies, 50) if load.latencies else None,
        "p99_ms": percentile(load.latencies, 99) if load.latencies else None,
        "max_ms": max(load.latencies) if load.latencies else None,
        "cpu_share": cpu / send_wall if send_wall else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.openloop")
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--header", action="append", default=[], help="Name: value (repeatable)")
    parser.add_argument("--max-connections", type=int, default=256)
    parser.add_argument("--keys", help="a file of API keys, one a line: request i carries key i mod n")
    args = parser.parse_args(argv)
    headers = dict(h.split(": ", 1) for h in args.header)
    keys = None
    if args.keys:
        with open(args.keys) as fh:
            keys = [line.strip() for line in fh if line.strip()]
    try:
        import uvloop  # the product's own event loop; the generator needs its speed too
    except ImportError:  # pragma: no cover - Windows
        runner = asyncio.run
    else:
        runner = uvloop.run
    result = runner(generate(args.url, headers, args.rate, args.seconds, args.max_connections, keys))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
