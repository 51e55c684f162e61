"""Open-loop (fixed-rate) load generator, run as its own process so it does not share an event
loop with the harness: ``python -m tests.benchmarks.openloop URL --rate R --seconds S [--header H]``.

Request i is due at t0 + i/R whether or not earlier ones were answered (no coordinated omission:
latency counts from the due time). Requests go over a pool of keep-alive connections, at most
``--max-in-flight`` at once. Prints one JSON line: requests sent, answered, errors, the rate it
actually achieved (requests started per second, and the share started within 1 ms of their due
time), latency percentiles, and its own CPU seconds. The caller must check ``held``: a
generator that could not keep up measured itself, not the server (Debian has wrk, not wrk2, so
this is the fixed-rate generator of the suite).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import aiohttp

#: The rate counts as held when at least this share of the target was started in the window.
HOLD_SHARE = 0.97


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[index]


async def generate(url: str, headers: dict[str, str], rate: float, seconds: float, max_in_flight: int) -> dict:
    total = max(1, int(rate * seconds))
    latencies: list[float] = []
    errors = 0
    late = 0
    in_flight = 0
    skipped = 0
    conn = aiohttp.TCPConnector(limit=max_in_flight, force_close=False)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def one(due: float) -> None:
            nonlocal errors, in_flight
            try:
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
            except aiohttp.ClientError:
                errors += 1
            finally:
                in_flight -= 1
            latencies.append((time.perf_counter() - due) * 1000)

        cpu0, t0 = time.process_time(), time.perf_counter()
        tasks = []
        for i in range(total):
            due = t0 + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -0.001:
                late += 1
            if in_flight >= max_in_flight:  # the server (or we) cannot keep up: count, do not queue
                skipped += 1
                continue
            in_flight += 1
            tasks.append(asyncio.create_task(one(due)))
        send_wall = time.perf_counter() - t0
        await asyncio.gather(*tasks)
        cpu = time.process_time() - cpu0
    started = len(tasks)
    achieved = started / send_wall if send_wall else 0.0
    return {
        "target_rate": rate,
        "achieved_rate": achieved,
        "requests": started,
        "skipped": skipped,
        "late_share": late / total,
        "errors": errors,
        "held": started >= HOLD_SHARE * total and achieved >= HOLD_SHARE * rate and skipped == 0,
        "p50_ms": percentile(latencies, 50) if latencies else None,
        "p99_ms": percentile(latencies, 99) if latencies else None,
        "cpu_share": cpu / send_wall if send_wall else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.openloop")
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--header", action="append", default=[], help="Name: value (repeatable)")
    parser.add_argument("--max-in-flight", type=int, default=256)
    args = parser.parse_args(argv)
    headers = dict(h.split(": ", 1) for h in args.header)
    result = asyncio.run(generate(args.url, headers, args.rate, args.seconds, args.max_in_flight))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
