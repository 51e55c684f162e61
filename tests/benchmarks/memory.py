"""6. Memory: peak RSS of each API, projector and stream process under the loads of the other
benchmarks (sampled every 250 ms while they ran), and the stream's RSS growth per 1,000
connections. It measures nothing itself: run it after the load benchmarks (the runner's order).
"""

from __future__ import annotations

from .common import Context, Result

NAME = "memory"


async def run(ctx: Context) -> Result:
    result = Result(NAME)
    if not ctx.memory:
        result.status = "n/a"
        result.notes.append(
            "n/a (no load benchmark ran in this invocation; memory is sampled during read_api, projector, stream, freshness)"
        )
        return result
    for label, values in sorted(ctx.memory.items()):
        result.metric(
            label if "per 1,000" in label else f"{label} peak RSS", "MB", product=list(values), higher_is_better=False
        )
    result.notes.append(
        "peak RSS sampled from /proc/<pid>/statm every 250 ms; no baseline (the bare servers are not sampled)"
    )
    return result
