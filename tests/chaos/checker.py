"""The checker: what must hold at the end of a mixed-fault run, whatever the faults were.

Every (post, locale) published is served by the API, was processed by every stream client
exactly once and, per partition, in ascending (offset, locale) order (the order cursors
promise: docs/resume.md), and is in the ``/changes`` walk exactly once; nothing of an aborted
transaction is seen anywhere; no read was older than it demanded (the readers record those as
they happen, with a resume the stream refused); the counters are exact (each token's
``post_count`` on ``GET /tokens`` and the ``GET /sentiment-pulse`` breakdown equal what the
acknowledged posts' last versions add up to: :func:`expected_counters`); no dead letter;
every process is ready.

Each webhook endpoint's receiver (:func:`webhook_tally`, in the report and, when not 0, as
violations: :func:`webhook_tallied`) acknowledged (a 200) every announcement its locale filter
admits among those the stream clients must get (:func:`expected`; **lost** otherwise); its
requests' positions per partition never went back in arrival order (**out of order**); an
announcement came more than once only as a redelivery of one ``webhook-id`` (**doubled**:
under another id), byte for byte the body of its first attempt (**changed**: other bytes under
one id); every
request's signature verified (**bad signatures**); nothing outside its filter or of an
aborted transaction came (**unexpected**). The rules are the receivers' own
(tests/support/receivers.py).

Three counts sum up what a fault cost partners (:func:`tally`, in the report and, when not 0, as
violations): **lost**, the (post, locale) pairs published and acknowledged that ``GET`` does not
serve at the end or that the ``/changes`` walk or a stream client never had; **doubled**, the
pairs a stream client was pushed, or the walk had, more than once; **refused**, the cursors the
service issued and then refused (each distinct client and cursor once, however often retried).

On the production shape (two api and two stream processes on shared ports) the limits hold
across processes: never more connections of the capped workspace open at once than its
limit of 5, though six clients try all along (:func:`stream_cap`), and never more requests
of the rated workspace served in a UTC minute than its 60 (:func:`rate_limit`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import aiohttp

from tests.chaos.harness import Cluster
from tests.chaos.history import Delivery, History, Key
from tests.support.receivers import BAD_SIGNATURE, backward, conflicting, doubled_ids
from tests.support.stack import BASE, auth


def expected(history: History, langs: tuple[str, ...] | None = None) -> set[Key]:
    """What a client must get: every (post, locale) published and acknowledged; of ``langs``
    only, when given (a webhook endpoint's locale filter)."""
    return {k for k in history.published if langs is None or k[1] in langs}


def deliveries(history: History) -> list[str]:
    """What the stream clients and the walker got, against what was published."""
    found: list[str] = []
    want = expected(history)
    for name, got in sorted(history.deliveries.items()):
        found += exactly_once(name, Counter(d.key for d in got), want, history.aborted)
        if disorder := out_of_order(got):
            found.append(f"{name}: out of order on partition {disorder}")
    found += exactly_once("/changes walk", Counter(history.walked), want, history.aborted)
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


def tally(history: History, unserved: set[Key]) -> dict[str, int]:
    """The lost, doubled and refused counts (the module's docstring) of a history whose end
    check found ``unserved`` not served by ``GET``."""
    want = expected(history)
    lost = set(unserved) | (want - set(history.walked))
    doubled = {k for k, n in Counter(history.walked).items() if n > 1}
    for got in history.deliveries.values():
        lost |= want - {d.key for d in got}
        doubled |= {k for k, n in Counter(d.key for d in got).items() if n > 1}
    return {"lost": len(lost), "doubled": len(doubled), "refused": len(history.refused_cursors())}


def tallied(counts: dict[str, int], history: History) -> list[str]:
    """A violation for each count of :func:`tally` that is not 0."""
    found = []
    if counts["lost"]:
        found.append(f"lost: {counts['lost']} (post, locale) pairs acknowledged, not served or never delivered")
    if counts["doubled"]:
        found.append(f"doubled: {counts['doubled']} (post, locale) pairs pushed or walked more than once")
    if counts["refused"]:
        first = history.refusals[0]
        found.append(
            f"refused: {counts['refused']} cursors the service issued were refused, the first to {first.who} "
            f"at {first.at:.1f}s: {first.reason[:200]}"
        )
    return found


#: The webhook counts of each endpoint, in the order the report names them.
WEBHOOK_COUNTS = ("lost", "out of order", "doubled", "changed", "bad signatures", "unexpected")


def webhook_cases(history: History, endpoint_id: str) -> dict[str, list]:
    """The cases of each count of :data:`WEBHOOK_COUNTS` at one endpoint (the module's docstring)."""
    langs = history.endpoints[endpoint_id]
    hooked = [h.request for h in history.hooked.get(endpoint_id, [])]
    verified = [r for r in hooked if r.answer != BAD_SIGNATURE]
    acked = {r.key for r in verified if r.answer == "ok"}
    outside = {r.key for r in verified if r.key[0] in history.aborted or (langs and r.key[1] not in langs)}
    return {
        "lost": sorted(expected(history, langs) - acked),
        "out of order": backward(verified),
        "doubled": list(doubled_ids(verified).items()),
        "changed": conflicting(verified),
        "bad signatures": [r.webhook_id for r in hooked if r.answer == BAD_SIGNATURE],
        "unexpected": sorted(outside),
    }


def webhook_tally(history: History) -> dict[str, dict[str, int]]:
    """Per webhook endpoint: its verified requests, the announcements it acknowledged, and the
    counts of :data:`WEBHOOK_COUNTS`."""
    found = {}
    for endpoint_id in sorted(history.endpoints):
        requests = [h.request for h in history.hooked.get(endpoint_id, []) if h.request.answer != BAD_SIGNATURE]
        found[endpoint_id] = {
            "requests": len(requests),
            "acknowledged": len({r.key for r in requests if r.answer == "ok"}),
            **{what: len(cases) for what, cases in webhook_cases(history, endpoint_id).items()},
        }
    return found


def webhook_tallied(counts: dict[str, dict[str, int]], history: History) -> list[str]:
    """A violation for each count of :func:`webhook_tally` that is not 0, with its first cases."""
    found = []
    for endpoint_id, got in counts.items():
        cases = webhook_cases(history, endpoint_id)
        found += [
            f"webhook {endpoint_id}: {what}: {got[what]}, e.g. {cases[what][:3]}"
            for what in WEBHOOK_COUNTS
            if got[what]
        ]
    return found


def webhooks_caught_up(history: History) -> bool:
    """Whether every webhook endpoint's receiver acknowledged every announcement its filter admits."""
    return all(
        expected(history, langs)
        <= {h.request.key for h in history.hooked.get(endpoint_id, []) if h.request.answer == "ok"}
        for endpoint_id, langs in history.endpoints.items()
    )


async def served(cluster: Cluster, history: History, http: aiohttp.ClientSession) -> tuple[list[str], set[Key]]:
    """Every expected (post, locale) served by ``GET /posts/{id}?lang=``; no aborted post served.
    The violations, and the expected pairs not served (for :func:`tally`)."""
    found: list[str] = []
    gate = asyncio.Semaphore(8)

    async def status(post_id: int, lang: str) -> int:
        async with gate:
            async with http.get(
                f"{cluster.api_url}{BASE}/posts/{post_id}", params={"lang": lang}, headers=auth(cluster.key)
            ) as resp:
                await resp.read()
                return resp.status

    pairs = sorted(history.published)
    statuses = await asyncio.gather(*(status(*k) for k in pairs))
    if unserved := [(k, s) for k, s in zip(pairs, statuses) if s != 200]:
        found.append(f"API: {len(unserved)} of {len(pairs)} not served, e.g. {unserved[:5]}")
    aborted = sorted(history.aborted)
    statuses = await asyncio.gather(*(status(p, "en-US") for p in aborted))
    if seen := [p for p, s in zip(aborted, statuses) if s != 404]:
        found.append(f"API: posts of an aborted transaction served: {seen[:5]}")
    return found, {k for k, _ in unserved}


#: How long the counters may take to show the last posts (the token list is refreshed on a change).
COUNTERS_WAIT_S = 20.0
SENTIMENTS = ("BULLISH", "NEUTRAL", "BEARISH")


def expected_counters(history: History, as_of: datetime) -> dict[str, dict[str, int]]:
    """Per token, its posts; per sentiment, the posts of the 24 h pulse ending with ``as_of``'s
    minute (whole minutes: those after ``as_of`` - 24 h and not after ``as_of``; docs/api.md)."""
    tokens: Counter[str] = Counter()
    pulse: Counter[str] = Counter({s: 0 for s in SENTIMENTS})
    for facts in history.posts.values():
        tokens.update(facts.tickers)
        minute = facts.published_at.replace(second=0, microsecond=0)
        if as_of - timedelta(hours=24) < minute <= as_of:
            pulse[facts.sentiment] += 1
    return {"tokens": dict(tokens), "pulse": dict(pulse)}


def served_counters(tokens: dict, pulse: dict) -> tuple[datetime, dict[str, dict[str, int]]]:
    """``as_of`` and the counters in the bodies of ``GET /tokens`` and ``GET /sentiment-pulse``."""
    as_of = datetime.fromisoformat(pulse["as_of"].replace("Z", "+00:00"))
    return as_of, {
        "tokens": {t["ticker"]: t["post_count"] for t in tokens["tokens"] if t["post_count"]},
        "pulse": {s: share["count"] for s, share in pulse["breakdown"].items()},
    }


def counter_mismatches(history: History, tokens: dict, pulse: dict) -> list[str]:
    as_of, got = served_counters(tokens, pulse)
    want = expected_counters(history, as_of)
    found = []
    for what in ("tokens", "pulse"):
        if got[what] != want[what]:
            diff = {
                k: (got[what].get(k, 0), want[what].get(k, 0)) for k in sorted(got[what].keys() | want[what].keys())
            }
            off = {k: v for k, v in diff.items() if v[0] != v[1]}
            found.append(f"counters: {what} served / expected {off} (as of {pulse['as_of']})")
    if sum(got["pulse"].values()) != pulse["total_posts"]:
        found.append(f"counters: pulse total_posts {pulse['total_posts']} is not the sum of {got['pulse']}")
    return found


async def counters(cluster: Cluster, history: History, http: aiohttp.ClientSession) -> list[str]:
    """The counters equal what the history adds up to, within ``COUNTERS_WAIT_S`` of asking."""
    deadline = time.monotonic() + COUNTERS_WAIT_S
    while True:
        try:
            bodies = []
            for path in ("/tokens", "/sentiment-pulse"):
                async with http.get(f"{cluster.api_url}{BASE}{path}", headers=auth(cluster.key)) as resp:
                    resp.raise_for_status()
                    bodies.append(await resp.json())
            found = counter_mismatches(history, *bodies)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            found = [f"counters: not read: {type(exc).__name__}: {exc}"]
        if not found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(1.0)


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
    """Whether every client, the walker and every webhook receiver hold every expected
    announcement (the run may end)."""
    want = expected(history)
    return (
        want <= set(history.walked)
        and all(want <= {d.key for d in got} for got in history.deliveries.values())
        and webhooks_caught_up(history)
    )


#: More connections of the capped workspace open at once than its limit, for less than this,
#: is put down to the order the run's one event loop sees two sockets in (a connection the
#: server closed, whose slot it gave the next client, is seen to close a moment after the next
#: one is seen to open); a stream that let six in for longer is a violation.
CAP_GRACE_S = 1.0


def over(spans: list[tuple[float, float, str]], limit: int) -> list[tuple[float, float]]:
    """The stretches of time during which more than ``limit`` of ``spans`` were open at once
    (a span ending when another starts is closed first)."""
    events = sorted([(start, 1) for start, _, _ in spans] + [(end, -1) for _, end, _ in spans])
    found, count, since = [], 0, None
    for at, step in events:
        count += step
        if count > limit and since is None:
            since = at
        elif count <= limit and since is not None:
            found.append((since, at))
            since = None
    return found


def most_open(spans: list[tuple[float, float, str]], hold_s: float = CAP_GRACE_S) -> int:
    """The most of ``spans`` open at once for longer than ``hold_s``."""
    return max((n for n in range(1, len(spans) + 1) if any(b - a > hold_s for a, b in over(spans, n - 1))), default=0)


def stream_cap(history: History, limit: int) -> list[str]:
    """A violation for each stretch of more than ``limit`` of the capped workspace's
    connections open at once that lasted longer than :data:`CAP_GRACE_S`."""
    return [
        f"stream cap: {limit + 1} or more connections of the capped workspace open at once "
        f"from {a:.1f}s to {b:.1f}s (limit {limit})"
        for a, b in over(history.capped, limit)
        if b - a > CAP_GRACE_S
    ]


def served_per_minute(history: History) -> Counter[int]:
    """The rated workspace's 200s per UTC minute (epoch minute), counting those started and
    answered within one minute: only those can be put in a window for sure."""
    return Counter(
        int(start // 60) for start, end, status in history.spent if status == 200 and int(start // 60) == int(end // 60)
    )


def rate_limit(history: History, limit: int) -> list[str]:
    """A violation for each UTC minute in which the rated workspace was served more than ``limit``
    requests (the limit is a fixed window per UTC minute, counted across every api process)."""
    return [
        f"rate limit: {n} requests of the rated workspace served in the minute starting "
        f"{datetime.fromtimestamp(minute * 60, timezone.utc):%H:%M} UTC (limit {limit})"
        for minute, n in sorted(served_per_minute(history).items())
        if n > limit
    ]


def limits_tally(history: History) -> dict[str, object]:
    """What the report says of the limits checked across processes."""
    statuses = Counter(status for _, _, status in history.spent)
    per_minute = served_per_minute(history)
    return {
        "capped connections": len(history.capped),
        "capped most open at once (over 1 s)": most_open(history.capped),
        "capped refusals": dict(history.capped_refusals),
        "rated requests": len(history.spent),
        "rated statuses": {str(k): v for k, v in sorted(statuses.items())},
        "rated most served in a minute": max(per_minute.values(), default=0),
        "rated minutes": len(per_minute),
    }
