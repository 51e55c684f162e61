"""A mixed-fault run: ``python -m tests.chaos.run --minutes 30 --seed 7 [--shape production] [--doc]``.

Starts the cluster (tests/chaos/harness.py), registers the webhook endpoints, runs the workload
and the nemesis together for ``--minutes``, stops the faults, lets every client catch up, checks (tests/chaos/checker.py)
and writes the report into ``chaos-results/<date>-seed<N>/`` (with the services' logs);
``--doc`` also puts its summary and picture into docs/reliability.md. Exits 1 on a violation,
after printing the seed and the first one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import re
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

import aiohttp

from tests.chaos import checker, report
from tests.chaos.harness import CAPPED_LIMIT, RATED_LIMIT, SHAPES, SINGLE, Shape, cluster
from tests.chaos.history import History
from tests.chaos.nemesis import GAP_S, KINDS, PRODUCTION_KINDS, Nemesis
from tests.chaos.workload import (
    CAPPED_CLIENTS,
    Capped,
    Follower,
    Hooks,
    PostWriter,
    Reader,
    Spender,
    TransactionalWriter,
    Walker,
)
from tests.reliability.run import conditions

RESULTS = report.REPO / "chaos-results"
#: How long the clients get, once the faults and the writers stopped, to catch up.
CATCH_UP_S = 120.0
#: How long after an injected fault ended an ERROR line is still put down to it (a restarted
#: process's start, a consumer that finds its session expired when it is resumed).
ERROR_AFTERMATH_S = 15.0
#: How long the stream clients and the walker get to hold their first cursor.
PLACED_S = 60.0


async def placed(clients: list[Follower | Walker], tasks: list[asyncio.Task]) -> None:
    """Until each of ``clients`` holds its first cursor (at most ``PLACED_S``); on failure the
    clients' ``tasks`` are cancelled and the run fails, naming who had none."""
    deadline = time.monotonic() + PLACED_S
    while not all(client.cursor for client in clients):
        if time.monotonic() > deadline or any(task.done() for task in tasks):
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            missing = [getattr(client, "name", "/changes walk") for client in clients if not client.cursor]
            raise RuntimeError(f"no first cursor within {PLACED_S:.0f} s: {missing}")
        await asyncio.sleep(0.1)


async def run(
    minutes: float,
    seed: int,
    results: Path,
    *,
    rate: float = 6.0,
    followers: int = 3,
    kinds: Mapping[str, int] | None = None,
    gap_s: tuple[float, float] = GAP_S,
    server_settings: Mapping[str, str] | None = None,
    shape: Shape = SINGLE,
) -> dict:
    """One run; its report (``violations`` empty when every check held). ``kinds`` and ``gap_s``:
    the nemesis's faults and the pause before each (:class:`~tests.chaos.nemesis.Nemesis`;
    by default the shape's); ``server_settings``: the PostgreSQL servers'; ``shape``: one Kafka
    node and one process each, or the production shape (:func:`~tests.chaos.harness.cluster`)."""
    rng = random.Random(seed)
    load_start, started = os.getloadavg(), time.monotonic()
    kinds = kinds or (KINDS if shape is SINGLE else PRODUCTION_KINDS)
    async with cluster(server_settings=server_settings, shape=shape) as c, aiohttp.ClientSession() as http:
        history = History(seed)
        hooks = Hooks(c, history, seed)
        await hooks.start()
        pushed: asyncio.Queue = asyncio.Queue(maxsize=20)
        writing, reading, faulting = asyncio.Event(), asyncio.Event(), asyncio.Event()
        names = [f"follower{n}" for n in range(followers)]
        for name in names:
            history.deliveries[name] = []
        followers_ = [Follower(n, c, history, random.Random(rng.random()), pushed) for n in names]
        walker = Walker(c, history)
        clients = [
            *(f.run(reading, http) for f in followers_),
            walker.run(reading, http),
            Reader(c, history, None).run(reading, http),
            Reader(c, history, pushed).run(reading, http),
        ]
        if c.limited_keys:
            clients += [
                *(
                    Capped(f"capped{n}", c, history, random.Random(rng.random())).run(writing, http)
                    for n in range(CAPPED_CLIENTS)
                ),
                Spender(c, history).run(writing, http),
            ]
        client_tasks = [asyncio.create_task(coro) for coro in clients]
        # The stream clients and the walker hold their first cursor before anything is
        # published: what they must get is everything acknowledged from then on.
        await placed([walker, *followers_], client_tasks)
        writers = [
            asyncio.create_task(PostWriter(c, history, random.Random(rng.random()), rate).run(writing)),
            asyncio.create_task(TransactionalWriter(c, history, random.Random(rng.random())).run(writing)),
        ]
        supervisor = asyncio.create_task(c.supervise(history))
        nemesis = asyncio.create_task(
            Nemesis(c, history, random.Random(rng.random()), kinds, gap_s, hooks).run(faulting)
        )
        try:
            await watch([nemesis, supervisor, *writers, *client_tasks], minutes * 60)
            faulting.set()
            await nemesis
            writing.set()
            await asyncio.gather(*writers)
            deadline = time.monotonic() + CATCH_UP_S
            while not checker.caught_up(history) and time.monotonic() < deadline:
                await asyncio.sleep(1.0)
            reading.set()
            for task in client_tasks:
                task.cancel()
            await asyncio.gather(*client_tasks, return_exceptions=True)
            for role in c.roles:
                with contextlib.suppress(TimeoutError, RuntimeError):
                    await c.ready(role, timeout=30)
            violations = list(history.violations)
            violations += checker.deliveries(history)
            found, unserved = await checker.served(c, history, http)
            violations += found
            counts = checker.tally(history, unserved)
            violations += checker.tallied(counts, history)
            hooked = checker.webhook_tally(history)
            violations += checker.webhook_tallied(hooked, history)
            violations += await checker.counters(c, history, http)
            violations += await checker.processes(c, http)
            if c.limited_keys:
                violations += checker.stream_cap(history, CAPPED_LIMIT)
                violations += checker.rate_limit(history, RATED_LIMIT)
            checked_at = history.now()
        finally:
            for task in [*writers, *client_tasks, supervisor, nemesis]:
                task.cancel()
            await asyncio.gather(*writers, *client_tasks, supervisor, nemesis, return_exceptions=True)
            await hooks.stop()
            c.stack.stop_all()
            shutil.copytree(c.stack.log_dir, results / "logs", dirs_exist_ok=True)
            for server_log in c.root.glob("*.log"):  # the PostgreSQL servers' (not JSON: apart)
                (results / "postgres").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(server_log, results / "postgres" / server_log.name)
    violations += unexplained_errors(results / "logs", history, checked_at)
    extra = {
        "fault_minutes": minutes,
        "shape": shape.name,
        **({"limits": checker.limits_tally(history)} if shape is not SINGLE else {}),
        "tally": counts,
        "webhooks": hooked,
        "failovers": [asdict(f) for f in history.failovers],
        "error_lines": error_lines(results / "logs"),
        "error_kinds": error_kinds(results / "logs"),
        "conditions": {
            **dict(line[2:].split(": ", 1) for line in conditions(started, load_start) if "Durability" not in line),
            "Servers": f"{shape.describe()}; two PostgreSQL servers, a primary and "
            "its synchronous streaming standby, which swap roles on a failover (fsync off)",
        },
    }
    return report.write(history, violations, results, extra)


async def watch(tasks: list[asyncio.Task], seconds: float) -> None:
    """Wait ``seconds``, failing at once if one of ``tasks`` (each runs until told to stop) ended."""
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.result()
        raise RuntimeError(f"{task.get_coro()} ended before the run did")


def error_lines(logs: Path) -> dict[str, int]:
    """ERROR (and CRITICAL) lines per service, over every process's log of the run."""
    return dict(Counter(service for service, _ in errors(logs)))


def error_kinds(logs: Path) -> dict[str, int]:
    """The same lines by service, logger and the start of the message (the figures in it
    blanked), most frequent first: what a reader needs to tell an injected fault's from a bug."""
    found = Counter(f"{service} {re.sub(r'[0-9]+', 'N', message)[:100]}" for service, message in errors(logs))
    return dict(found.most_common())


def errors(logs: Path) -> list[tuple[str, str]]:
    """(service, "logger: message") of each ERROR or CRITICAL line of the services' logs."""
    return [(service, message) for service, _, message in timed_errors(logs)]


def timed_errors(logs: Path) -> list[tuple[str, float, str]]:
    """(service, epoch seconds, "logger: message") of each ERROR or CRITICAL line of the
    services' logs (one JSON object a line, as every service writes them)."""
    found = []
    for log in sorted(logs.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line a library printed as it is
            if isinstance(entry, dict) and entry.get("level") in ("error", "critical"):
                at = datetime.fromisoformat(str(entry.get("ts")).replace("Z", "+00:00")).timestamp()
                found.append((log.name.split("-", 1)[0], at, f"{entry.get('logger')}: {entry.get('msg')}"))
    return found


def unexplained_errors(logs: Path, history: History, until: float) -> list[str]:
    """A violation for each ERROR line, logged before the checks ended at ``until``, that no
    injected fault explains: none was under way from a second before it to
    :data:`ERROR_AFTERMATH_S` after it ended (an ERROR line says an operator is needed; a
    fault we inject and the system rides out must not need one, and anything else is a bug).
    What was logged while the cluster was set up, before the run began, is not judged: a newly
    formed three-node cluster moves the group coordinator while its offsets topic's partitions
    get their leaders, and aiokafka logs the projector's first offset commit failing then."""
    found = []
    for service, at, message in timed_errors(logs):
        t = at - history.wall_t0
        explained = any(f.start - 1.0 <= t <= f.end + ERROR_AFTERMATH_S for f in history.faults)
        if 0 <= t <= until and not explained:
            found.append(f"{t:.1f}s: {service} logged an ERROR no injected fault explains: {message[:200]}")
    return found


def results_dir(seed: int) -> Path:
    return RESULTS / f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-seed{seed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the nemesis injects faults")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--rate", type=float, default=6.0, help="new posts per second (librdkafka)")
    parser.add_argument("--followers", type=int, default=3, help="stream clients")
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default=SINGLE.name,
        help="single: one Kafka node, one api and one stream process; production: three Kafka nodes, two api and "
        "two stream processes on shared ports",
    )
    parser.add_argument("--doc", action="store_true", help="put the summary and picture into docs/reliability.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    results = results_dir(args.seed)
    shape = SHAPES[args.shape]
    found = asyncio.run(run(args.minutes, args.seed, results, rate=args.rate, followers=args.followers, shape=shape))
    print(report.markdown(found, "timeline.png"))
    print(f"report: {results}")
    if args.doc:
        report.update_doc(found, results)
        print(f"updated {report.DOC}")
    if found["violations"]:
        print(f"FAIL seed {args.seed}: {len(found['violations'])} violation(s); the first: {found['violations'][0]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
