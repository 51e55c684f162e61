"""The checker: what must hold at the end of a mixed-fault run, whatever the faults were.

Every (post, locale) published is served by the API, was processed by every stream client
exactly once and, per partition, in ascending (offset, locale) order (the order cursors
promise: docs/resume.md), and is in the ``/changes`` walk exactly once; nothing of an aborted
transaction is seen anywhere; no read was older than it demanded (the readers record those as
they happen, with a resume the stream refused); no dead letter; every process is ready.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp

from tests.chaos.harness import Cluster
from tests.chaos.history import Delivery, History, Key
from tests.support.stack import BASE, auth


class Violations(AssertionError):
    """A failed check: the seed, how many violations, the first one."""


def deliveries(history: History) -> list[str]:
    """What the stream clients and the walker got, against what was published."""
    found: list[str] = []
    expected = set(history.published)
    for name, got in sorted(history.deliveries.items()):
        found += exactly_once(name, Counter(d.key for d in got), expected, history.aborted)
        if disorder := out_of_order(got):
            found.append(f"{name}: out of order on partition {disorder}")
    found += exactly_once("/changes walk", Counter(history.walked), expected, history.aborted)
    return found


def exactly_once(who: str, counts: Counter[Key], expected: set[Key], aborted: set[int]) -> list[str]:
    found: list[str] = []
    if missing := sorted(expected - counts.keys()):
        found.append(f"{who}: {len(missing)} announcements never received, e.g. {missing[:5]}")
    if doubled := sorted(k for k, n in counts.items() if n > 1):
        found.append(f"{who}: {len(doubled)} received more than once, e.g. {doubled[:5]}")
    if seen := sorted(k for k in counts if k[0] in aborted):
        found.append(f"{who}: received posts of an aborted transaction: {seen[:5]}")
    return found


def out_of_order(got: list[Delivery]) -> str | None:
    """The first delivery whose (offset, locale) is not above the previous one of its partition."""
    last: dict[int, tuple[int, str]] = {}
    for d in got:
        mark = (d.offset, d.key[1])  # str order is byte order for locale codes
        if d.partition in last and mark <= last[d.partition]:
            return f"{d.partition}: {mark} after {last[d.partition]} ({d.key})"
        last[d.partition] = mark
    return None


async def served(cluster: Cluster, history: History, http: aiohttp.ClientSession) -> list[str]:
    """Every expected (post, locale) served by ``GET /posts/{id}?lang=``; no aborted post served."""
    found: list[str] = []
    gate = asyncio.Semaphore(8)

    async def status(post_id: int, lang: str) -> int:
        async with gate:
            async with http.get(
                f"{cluster.api_url}{BASE}/posts/{post_id}", params={"lang": lang}, headers=auth(cluster.key)
            ) as resp:
                await resp.read()
                return resp.status

    expected = sorted(history.published)
    statuses = await asyncio.gather(*(status(*k) for k in expected))
    if unserved := [(k, s) for k, s in zip(expected, statuses) if s != 200]:
        found.append(f"API: {len(unserved)} of {len(expected)} not served, e.g. {unserved[:5]}")
    aborted = sorted(history.aborted)
    statuses = await asyncio.gather(*(status(p, "en-US") for p in aborted))
    if seen := [p for p, s in zip(aborted, statuses) if s != 404]:
        found.append(f"API: posts of an aborted transaction served: {seen[:5]}")
    return found


async def processes(cluster: Cluster, http: aiohttp.ClientSession) -> list[str]:
    """Every service process ready; no dead letter."""
    found: list[str] = []
    for role, service in cluster.current.items():
        try:
            async with http.get(f"{service.admin_url}/readyz", timeout=aiohttp.ClientTimeout(total=5)) as resp:
                if resp.status != 200:
                    found.append(f"{role} not ready: {resp.status} {(await resp.text())[:300]}")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            found.append(f"{role} not ready: {type(exc).__name__}")
    if (dead := await cluster.dead_letters()) != 0:
        found.append(f"{dead} dead letters")
    return found


def caught_up(history: History) -> bool:
    """Whether every client and the walker hold every expected announcement (the run may end)."""
    expected = set(history.published)
    return expected <= set(history.walked) and all(
        expected <= {d.key for d in got} for got in history.deliveries.values()
    )


def raise_if_any(history: History, found: list[str]) -> None:
    if found:
        raise Violations(f"seed {history.seed}: {len(found)} violation(s); the first: {found[0]}")
