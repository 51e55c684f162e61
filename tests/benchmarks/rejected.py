"""7. Rejected traffic: what refused requests cost the database, and what a flood of them does to
a quiet partner.

- Database transactions per rejected request: ``xact_commit + xact_rollback`` of the database
  (pg_stat_database) across N requests with well-formed unknown keys plus N to a workspace over
  its rate limit, minus the background rate (stamp polls, projector) measured over an equally
  long idle window. Target < 0.05 (unknown keys and known-exhausted workspaces are refused
  from memory; only the first refusal of a window asks the database).
- A quiet partner's p99 at a fixed rate (open-loop generator in its own process, /languages),
  alone (the baseline column) and under a flood of rejected traffic at 20x its rate (wrk with
  paced connections, unknown keys and an over-limit workspace alternating; a Python generator
  in smoke mode). Target: within 2x. A flood counts as held at 90 % of its rate (wrk's pacing
  is per connection, so the rate is approximate); the quiet generator must hold 97 %.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import time

import aiohttp

from tests.support.stack import BASE
from tickerwire.services.common.http.keys import generate_key

from .common import (
    Context,
    Result,
    catalog,
    db_transactions,
    open_loop_process,
    output_within,
    posts,
    provision_wide_open,
)

NAME = "rejected"


async def _flood(url: str, keys: list[str], rate: float, seconds: float) -> list[dict]:
    """Rejected traffic at about ``rate`` per second, alternating ``keys``. With wrk: paced
    connections (each waits 1000*C/rate ms between its requests; wrk uses little CPU, so the
    flood does not starve the server of the shared cores); without it (smoke mode only): one
    Python open-loop process per key. Returns reports with ``achieved_rate`` and ``held``."""
    if shutil.which("wrk") is None:
        return await asyncio.gather(
            *(open_loop_process(url, {"Authorization": f"Bearer {k}"}, rate / len(keys), seconds) for k in keys)
        )
    connections = 300  # a long pause per connection (150 ms at 2,000/s), so response times hardly slow the pace
    pause_ms = 1000 * connections / rate
    headers = ", ".join(f'{{["Authorization"] = "Bearer {k}"}}' for k in keys)
    script = (
        f"local headers = {{{headers}}}\nlocal n = 0\n"
        "request = function()\n  n = n + 1\n  return wrk.format(nil, nil, headers[n % #headers + 1])\nend\n"
        # uniform around the mean pause: connections that all start together must not stay in step
        f"delay = function() return math.random(0, {2 * pause_ms:.0f}) end\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(script)
    try:
        proc = await asyncio.create_subprocess_exec(
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "-s",
            lua.name,
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out = (await output_within(proc, seconds + 60, f"wrk's {seconds:.0f} s flood")).decode()
    finally:
        os.unlink(lua.name)
    m = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if not m:
        raise RuntimeError(f"wrk output not understood:\n{out}")
    achieved = float(m.group(1))
    return [{"achieved_rate": achieved, "requests": int(achieved * seconds), "held": achieved >= 0.9 * rate}]


async def run(ctx: Context) -> Result:
    result = Result(NAME)
    s = ctx.settings
    seconds = s.pick(1.0, 5.0)
    quiet_rate = s.pick(20.0, 100.0)
    async with ctx.stack() as stack:
        await stack.start("projector")
        await stack.publish([*catalog(), *posts(1, 50)])
        quiet_key = await provision_wide_open(stack, "ws_quiet")
        noisy_key = await stack.provision("ws_noisy", rate_limit_per_minute=60, daily_quota=1_000_000)
        api = await stack.start("api")
        url = api.url + BASE + "/languages"
        unknown = generate_key()

        # Use up the noisy workspace's minute first, so the measured traffic is refused only.
        async with aiohttp.ClientSession() as http:
            for _ in range(61):
                async with http.get(url, headers={"Authorization": f"Bearer {noisy_key}"}) as resp:
                    await resp.read()

        # Cost per rejected request, in database transactions.
        cost = result.metric(
            "db transactions per rejected request",
            "xact/req",
            higher_is_better=False,
            target="< 0.05",
            check=lambda p, r: p < 0.05,
        )
        for _ in range(s.runs):
            t0 = await db_transactions(stack.database_url)
            started = time.perf_counter()
            await asyncio.sleep(seconds)
            idle = (await db_transactions(stack.database_url)) - t0
            idle_rate = idle / (time.perf_counter() - started)
            t1 = await db_transactions(stack.database_url)
            started = time.perf_counter()
            runs = await _flood(url, [unknown, noisy_key], s.pick(200.0, 1000.0), seconds)
            busy = (await db_transactions(stack.database_url)) - t1
            elapsed = time.perf_counter() - started
            sent = sum(r["requests"] for r in runs)
            cost.product.append(max(0.0, busy - idle_rate * elapsed) / max(sent, 1))
            cost.note = (
                f"{sent} rejected requests in {elapsed:.1f} s (a new UTC minute re-admits the noisy workspace's "
                f"60, which count here too); background {idle_rate:.1f} xact/s subtracted; "
                f"generators held the rate: {all(r['held'] for r in runs)}"
            )

        # The quiet partner, alone and under a 20x flood.
        p99 = result.metric(
            "quiet partner p99 under a 20x rejected flood",
            "ms",
            higher_is_better=False,
            target="within 2x of alone",
            check=lambda p, r: r is not None and r >= 0.5,
        )
        notes = []
        for _ in range(s.runs):
            alone = await open_loop_process(url, {"Authorization": f"Bearer {quiet_key}"}, quiet_rate, seconds)
            quiet_task = asyncio.create_task(
                open_loop_process(url, {"Authorization": f"Bearer {quiet_key}"}, quiet_rate, seconds)
            )
            flood = await _flood(url, [unknown, noisy_key], 20 * quiet_rate, seconds)
            flooded = await quiet_task
            if alone["held"] and flooded["held"] and all(f["held"] for f in flood):
                p99.baseline.append(alone["p99_ms"])
                p99.product.append(flooded["p99_ms"])
            notes.append(
                f"quiet {quiet_rate:.0f}/s alone p99 {alone['p99_ms']:.2f} ms, flooded p99 {flooded['p99_ms']:.2f} ms; "
                f"flood {sum(f['achieved_rate'] for f in flood):,.0f}/s achieved of {20 * quiet_rate:,.0f}/s; "
                f"all generators held: {alone['held'] and flooded['held'] and all(f['held'] for f in flood)}"
            )
        p99.note = (
            "baseline column = the quiet partner alone; " if p99.product else "n/a (a generator did not hold its rate) "
        ) + notes[-1]
    return result
