"""The offload of a streaming replica: statements on the primary per partner request, with and
without a replica, in one run (``python -m tests.benchmarks.replicas``; not part of run.py).

An embedded primary with one hot-standby replica; a projector; 2,000 posts. Then the same
request mix, at the same concurrency, against two API processes one after the other: one
reading from the primary only, one reading from the replica. The primary's own count of
committed transactions (``pg_stat_database.xact_commit``, one per statement outside an
explicit transaction) over each phase, divided by the requests answered, is the figure:
everything the primary did in that time (the idle projector, the API's admission batches,
its change-stamp polls and, with the replica, its replica monitor) is counted against the
requests.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import aiohttp
import asyncpg

from tests.support.events import locale_ev, post_ev, token_ev
from tests.support.replicas import replicated_cluster, replicated_stack
from tests.support.stack import BASE, auth
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka

#: The mix: a listing (page-cached), a detail (page-cached once read), a search and a page after
#: a cursor (both always read the database), and the pulse.
PATHS = (
    "/posts?limit=20",
    "/posts/{id}",
    "/search?q=bitcoin&limit=10",
    "/posts?after={id}&limit=20",
    "/sentiment-pulse",
)


async def committed(dsn: str) -> int:
    """The server's committed transactions in the database of ``dsn``, as its statistics show them now."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
    finally:
        await conn.close()


async def phase(api: str, key: str, ids: list[int], requests: int, concurrency: int) -> tuple[int, float]:
    """``requests`` requests of the mix over ``concurrency`` connections: (200s, seconds)."""
    rng = random.Random(7)
    paths = [rng.choice(PATHS).format(id=rng.choice(ids)) for _ in range(requests)]
    ok = 0
    started = time.perf_counter()

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal ok
        while paths:
            async with http.get(api + BASE + paths.pop(), headers=auth(key)) as resp:
                await resp.read()
                ok += resp.status == 200

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
    return ok, time.perf_counter() - started


async def main(kafka_bootstrap: str, posts: int, requests: int, concurrency: int) -> None:
    with replicated_cluster([0]) as (primary, replicas):
        async with replicated_stack(primary, replicas, kafka_bootstrap, f"b{random.randrange(16**8):08x}") as stack:
            ids = list(range(1, posts + 1))
            await stack.publish([locale_ev("en-US", default=True), token_ev("BTC"), *(post_ev(i) for i in ids)])
            await stack.start("projector")
            key = await stack.provision("ws_bench", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
            replica_dsn = stack.env()["TICKERWIRE_DATABASE_READ_URLS"]
            rows = []
            for label, env in (("primary only", {"TICKERWIRE_DATABASE_READ_URLS": ""}), ("one replica", {})):
                api = await stack.start("api", **env)
                await phase(api.url, key, ids, 200, concurrency)  # warm: connections, caches
                await asyncio.sleep(1.5)  # statistics are flushed at most once a second
                before = (await committed(stack.database_url), await committed(replica_dsn))
                ok, seconds = await phase(api.url, key, ids, requests, concurrency)
                await asyncio.sleep(1.5)
                after = (await committed(stack.database_url), await committed(replica_dsn))
                stack.stop(api)
                on_primary, on_replica = after[0] - before[0], after[1] - before[1]
                rows.append((label, ok, seconds, on_primary, on_replica))
    print(f"{requests} requests of the mix {', '.join(PATHS)}, {concurrency} at a time, {posts} posts")
    print("| API reads from | 200s | seconds | primary statements | per request | replica statements | per request |")
    print("|---|---|---|---|---|---|---|")
    for label, ok, seconds, on_primary, on_replica in rows:
        print(
            f"| {label} | {ok} | {seconds:.1f} | {on_primary} | {on_primary / ok:.3f} | {on_replica} | {on_replica / ok:.3f} |"
        )
    print(
        f"offload: the primary runs {rows[1][3] / rows[1][1] / (rows[0][3] / rows[0][1]):.2f}x the statements per request "
        "with the replica that it runs without"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", help="bootstrap servers of a broker (default: an Apache Kafka of its own)")
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    if args.kafka:
        asyncio.run(main(args.kafka, args.posts, args.requests, args.concurrency))
    else:
        with tempfile.TemporaryDirectory(prefix="tickerwire-bench-kafka-") as root, ApacheKafka(Path(root)) as broker:
            asyncio.run(main(broker.bootstrap_servers, args.posts, args.requests, args.concurrency))
