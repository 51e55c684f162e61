"""1. Read API: peak throughput and p50/p99 at a fixed rate per endpoint, against a bare
aiohttp handler (one process, like the product) that returns the same bytes.

Method: peak = closed-loop load for a few seconds from ``wrk`` (required in a full run; a
missing wrk is an error, never a silent fallback). Latency = open-loop load at ONE fixed rate,
half of the product's peak, for the product and the baseline alike (so their latency ratio
compares like with like), from ``tests.benchmarks.openloop`` in its own process, each latency
counted from the request's scheduled time (no coordinated omission). When the generator does
not hold the rate, the latency of that run is not recorded (the note says so): it would
measure the generator. Smoke mode (CI) uses a Python closed loop for the peak and says so.

The floor: each endpoint's peak is also measured against ``baselines floor``, in the same runs:
the bare handler plus only the headers every counted 200 carries, done the cheapest way ("floor
throughput, headers only"), and the same plus one access-log line per request ("floor
throughput, headers and log line"), each against the bare handler. The first is the most any
implementation of the spec on aiohttp could reach; a throughput target above it is out of
reach by construction, whatever the product does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time

from tests.support.stack import BASE

from .common import (
    Context,
    LoadResult,
    Result,
    RssSampler,
    baseline_process,
    catalog,
    closed_loop,
    open_loop_process,
    posts,
    probe,
    provision_wide_open,
    require_wrk,
)

NAME = "read_api"

TARGET_RATIO = {
    "/posts": 0.5,
    "/posts two filters": 0.5,
    "/posts/{id}": 0.5,
    "/search": 0.5,
    "/tokens": 0.8,
    "/languages": 0.8,
}


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
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
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
    return LoadResult(
        requests, int(non2xx.group(1)) if non2xx else 0, seconds, [], (usage.ru_utime + usage.ru_stime) * seconds / wall
    )


async def peak(ctx: Context, url: str, key: str | None, use_wrk: bool) -> LoadResult:
    s = ctx.settings
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    seconds = s.pick(1.0, 3.0)
    return (
        wrk_peak(url, key, seconds) if use_wrk else await closed_loop(url, headers, seconds, connections=s.pick(8, 32))
    )


async def at_rate(ctx: Context, url: str, key: str | None, rate: float) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return await open_loop_process(url, headers, rate, ctx.settings.pick(1.0, 3.0))


async def run(ctx: Context) -> Result:
    result = Result(NAME)
    use_wrk = not ctx.settings.smoke
    if use_wrk:
        require_wrk()
    result.notes.append(
        f"peak: {'wrk -t1 -c32 (closed loop)' if use_wrk else 'smoke: python aiohttp closed loop (not comparable)'}; "
        "latency: open-loop generator in its own process at one fixed rate (half the product's peak) for product "
        "and baseline alike; a run whose generator did not hold the rate records no latency"
    )
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
                status, body, missing, sent_headers = await probe(url, headers)
                throughput = result.metric(
                    f"{label} throughput",
                    "req/s",
                    target=f">= {TARGET_RATIO[label]}x baseline" if label in TARGET_RATIO else "",
                    check=(lambda p, r, t=TARGET_RATIO.get(label): r is not None and r >= t)
                    if label in TARGET_RATIO
                    else None,
                )
                p50 = result.metric(f"{label} p50 @ half peak", "ms", higher_is_better=False)
                p99 = result.metric(
                    f"{label} p99 @ half peak",
                    "ms",
                    higher_is_better=False,
                    target="< 10 ms",
                    check=lambda p, r: p < 10,
                )
                floors = {
                    log: result.metric(
                        f"{label} floor throughput, {'headers and log line' if log else 'headers only'}", "req/s"
                    )
                    for log in (False, True)
                }
                if missing:
                    throughput.note = p50.note = p99.note = floors[False].note = floors[True].note = missing
                    continue
                with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
                    fh.write(body)
                with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as hh:
                    json.dump(sent_headers, hh)
                floor_args = ("--body", fh.name, "--headers", hh.name, "--key", key)
                async with (
                    baseline_process("http", "--body", fh.name) as (_, base_url),
                    baseline_process("floor", *floor_args, "--no-access-log") as (_, bare_floor_url),
                    baseline_process("floor", *floor_args) as (_, floor_url),
                ):
                    notes = []
                    base_target = base_url + BASE + path
                    for _ in range(ctx.settings.runs):
                        mine, bare = await peak(ctx, url, key, use_wrk), await peak(ctx, base_target, None, use_wrk)
                        for log, floor_base in ((False, bare_floor_url), (True, floor_url)):
                            least = await peak(ctx, floor_base + BASE + path, key, use_wrk)
                            floors[log].product.append((least.requests - least.errors) / least.seconds)
                            floors[log].baseline.append((bare.requests - bare.errors) / bare.seconds)
                        # Only 200s count: an overloaded product answers some requests 503 (pool
                        # checkout or statement timeout), and those are not throughput.
                        throughput.product.append((mine.requests - mine.errors) / mine.seconds)
                        throughput.baseline.append((bare.requests - bare.errors) / bare.seconds)
                        if mine.errors or bare.errors:
                            notes.append(
                                f"non-200 answers at peak: product {mine.errors}, baseline {bare.errors} (not counted)"
                            )
                        rate = max(1.0, mine.rps / 2)
                        for side, target_url, k in (("product", url, key), ("baseline", base_target, None)):
                            run_ = await at_rate(ctx, target_url, k, rate)
                            if run_["held"] and not run_["errors"]:
                                getattr(p50, side).append(run_["p50_ms"])
                                getattr(p99, side).append(run_["p99_ms"])
                            notes.append(
                                f"{side} @ {rate:,.0f}/s: achieved {run_['achieved_rate']:,.0f}/s "
                                f"({'held' if run_['held'] else 'NOT held: latency not recorded'}), "
                                f"{run_['errors']} errors, {run_['late_share']:.0%} sent over 1 ms late (charged to the server), "
                                f"generator cpu {run_['cpu_share']:.2f}"
                            )
                        notes.append(f"peak generator cpu: product {mine.cpu_share:.2f}, baseline {bare.cpu_share:.2f}")
                    throughput.note = f"{len(body)} B body" + "".join(
                        f"; {n}" for n in notes if n.startswith("non-200")
                    )
                    floors[False].note = (
                        "product column: bare aiohttp plus only the headers every counted 200 carries "
                        "(tests/benchmarks/baselines.py, floor --no-access-log), the most any "
                        "implementation on aiohttp could reach; baseline column: bare aiohttp"
                    )
                    floors[True].note = "the same plus one access-log line per request (baselines.py, floor)"
                    p99.note = "; ".join(notes[-3:])
                    for m in (p50, p99):
                        if not m.product and not m.baseline:
                            m.note = "n/a (the generator held the rate in no run) " + p99.note
                os.unlink(fh.name)
                os.unlink(hh.name)
        ctx.record_rss(rss, "read_api load: ")
    return result
