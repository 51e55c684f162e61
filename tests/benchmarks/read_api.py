"""1. Read API: peak throughput and p50/p99 at half of peak per endpoint, against a bare
aiohttp handler (one process, like the product) that returns the same bytes.

Method: peak = closed-loop load for a few seconds (wrk with a Lua script for the
Authorization header when installed and not in smoke mode; a Python aiohttp generator
otherwise). Latency = open-loop load at a fixed rate of half that peak from a Python
generator, each latency counted from the request's scheduled time (no coordinated omission).
The load generator's CPU share (CPU seconds per wall second) is reported in the notes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time

from tests.support.stack import BASE

from .common import Context, LoadResult, Result, RssSampler, baseline_process, catalog, closed_loop, open_loop, percentile, posts, probe, provision_wide_open

NAME = "read_api"

TARGET_RATIO = {"/posts": 0.5, "/posts two filters": 0.5, "/tokens": 0.8, "/languages": 0.8}


def endpoints(post_id: int, word: str) -> list[tuple[str, str]]:
    return [
        ("/posts", "/posts"),
        ("/posts two filters", "/posts?sentiment=BULLISH,NEUTRAL&importance_min=20"),
        ("/posts/{id}", f"/posts/{post_id}"),
        ("/search", f"/search?q={word}"),
        ("/tokens", "/tokens"),
        ("/languages", "/languages"),
    ]


def wrk_peak(url: str, key: str | None, seconds: float, connections: int = 32) -> LoadResult:
    """wrk closed-loop run; CPU from the child's rusage (os.wait4)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        if key:
            lua.write(f'wrk.headers["Authorization"] = "Bearer {key}"\n')
    started = time.perf_counter()
    proc = subprocess.Popen(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", lua.name, url],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    os.unlink(lua.name)
    m = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if not m:
        raise RuntimeError(f"wrk output not understood:\n{out}")
    requests = int(float(m.group(1)) * seconds)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out)
    return LoadResult(requests, int(non2xx.group(1)) if non2xx else 0, seconds, [], (usage.ru_utime + usage.ru_stime) * seconds / wall)


async def measure(ctx: Context, url: str, key: str | None, use_wrk: bool) -> tuple[float, float, float, str]:
    """(peak rps, p50 ms, p99 ms at half of peak, note on the load generator)."""
    s = ctx.settings
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    seconds = s.pick(1.0, 3.0)
    peak = wrk_peak(url, key, seconds) if use_wrk else await closed_loop(url, headers, seconds, connections=s.pick(8, 32))
    if peak.errors:
        raise RuntimeError(f"{peak.errors} non-200 answers from {url} at peak load")
    half = await open_loop(url, headers, rate=max(1.0, peak.rps / 2), seconds=s.pick(1.0, 3.0))
    note = f"{'wrk' if use_wrk else 'python'} cpu {peak.cpu_share:.2f} at peak, python open-loop cpu {half.cpu_share:.2f} at half"
    return peak.rps, percentile(half.latencies_ms, 50), percentile(half.latencies_ms, 99), note


async def run(ctx: Context) -> Result:
    result = Result(NAME)
    use_wrk = not ctx.settings.smoke and shutil.which("wrk") is not None
    result.notes.append(f"load generator for peak: {'wrk -t1 -c32' if use_wrk else 'python aiohttp closed loop'}; "
                        "latency at half of peak: python open-loop fixed-rate generator")
    async with ctx.stack() as stack:
        projector = await stack.start("projector")
        events = posts(1, ctx.settings.pick(200, 2000))
        await stack.publish([*catalog(), *events])
        key = await provision_wide_open(stack)
        api = await stack.start("api")
        headers = {"Authorization": f"Bearer {key}"}
        word = max(events[0].data.translations[0].title.split(), key=len).strip(".,:;!?'\"").lower()
        with RssSampler() as rss:
            rss.watch("api", api.proc.pid)
            rss.watch("projector", projector.proc.pid)
            for label, path in endpoints(events[-1].data.id, word):
                url = api.url + BASE + path
                status, body, missing = await probe(url, headers)
                throughput = result.metric(f"{label} throughput", "req/s", target=f">= {TARGET_RATIO[label]}x baseline" if label in TARGET_RATIO else "",
                                           check=(lambda p, r, t=TARGET_RATIO.get(label): r is not None and r >= t) if label in TARGET_RATIO else None)
                p50 = result.metric(f"{label} p50 @ half peak", "ms", higher_is_better=False)
                p99 = result.metric(f"{label} p99 @ half peak", "ms", higher_is_better=False, target="< 10 ms", check=lambda p, r: p < 10)
                if missing:
                    throughput.note = p50.note = p99.note = missing
                    continue
                with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
                    fh.write(body)
                async with baseline_process("http", "--body", fh.name) as (_, base_url):
                    notes = []
                    for _ in range(ctx.settings.runs):
                        for target_url, k, metrics_side in ((url, key, "product"), (base_url + BASE + path, None, "baseline")):
                            rps, lat50, lat99, note = await measure(ctx, target_url, k, use_wrk)
                            getattr(throughput, metrics_side).append(rps)
                            getattr(p50, metrics_side).append(lat50)
                            getattr(p99, metrics_side).append(lat99)
                            notes.append(f"{metrics_side}: {note}")
                    throughput.note = f"{len(body)} B body; " + notes[-2]
                os.unlink(fh.name)
        ctx.record_rss(rss, "read_api load: ")
    return result
