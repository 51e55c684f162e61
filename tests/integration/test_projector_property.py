"""Property: however the log is delivered, the read model is the one its entities' latest versions make.

Hypothesis draws random histories for a small universe of posts, tokens, categories, locales,
workspaces, keys, embeds and heartbeats (random versions, shuffled so older versions follow
newer ones, duplicated, with a poison record), spreads them over partitions by entity key as
the real publisher does, and delivers them to ``apply_batch`` in random batches interleaved
across partitions, with random replays from earlier offsets (a rebalance, a restart, a
racing consumer). The result must equal

* the read model built from each entity's latest version alone (everything partners can see),
* the read model built by applying the same log one record at a time, in order (every row,
  hidden translation rows and the stream's announcement offsets included), and
* post_count and the sentiment buckets recomputed from scratch from the posts table.
"""

from __future__ import annotations

import zlib
from datetime import timedelta

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.events import (
    T0,
    api_key_ev,
    category_ev,
    embed_ev,
    heartbeat_ev,
    locale_ev,
    post_ev,
    records,
    token_ev,
    workspace_ev,
)
from tests.support.readmodel import announcements, comparable, derived_from_scratch, read_model, reset
from tickerwire.schemas.models import entity_key
from tickerwire.services.projector.apply import ConsumedRecord, apply_batch

LANGS = ("en-US", "de-DE", "fr-FR")
#: Two partitions per topic, so one entity's events share a partition and others interleave.
PARTITIONS = 2
TIMES = [T0 - timedelta(hours=h, minutes=m) for h, m in ((0, 0), (0, 1), (2, 30), (25, 0))]

versions = st.lists(st.integers(1, 9), min_size=1, max_size=3, unique=True)


@st.composite
def post_history(draw, post_id: int):
    out = []
    for v in draw(versions):
        status = draw(st.sampled_from(["draft", "queued", "publishing", "published", "partial", "failed", "retracted"]))
        out.append(
            post_ev(
                post_id,
                v,
                status=status,
                at=draw(st.sampled_from(TIMES + ([None] if status not in ("published", "partial") else []))),
                sentiment=draw(st.sampled_from(["BULLISH", "NEUTRAL", "BEARISH"])),
                tickers=draw(st.lists(st.sampled_from(["BTC", "ETH", "SOL"]), max_size=3)),
                categories=draw(st.lists(st.sampled_from(["btc", "eth", "ghost"]), max_size=2, unique=True)),
                langs=draw(st.lists(st.sampled_from(LANGS), min_size=1, max_size=3, unique=True)),
                importance=draw(st.integers(0, 100)),
            )
        )
    return out


@st.composite
def category_history(draw, slug: str, leaf: bool):
    out = []
    for v in draw(versions):
        names = draw(st.dictionaries(st.sampled_from(LANGS), st.sampled_from(["A", "B"]), min_size=1))
        names = {lang: f"{slug}-{n}" for lang, n in names.items()}
        group = draw(st.sampled_from(["markets", "tech"])) if leaf else None
        out.append(category_ev(slug, v, group=group, names=names, position=draw(st.integers(0, 2))))
    return out


@st.composite
def histories(draw):
    events = []
    for post_id in (1, 2, 3):
        events += draw(post_history(post_id))
    for slug, leaf in (("markets", False), ("tech", False), ("btc", True), ("eth", True)):
        events += draw(category_history(slug, leaf))
    for code in LANGS:
        events += [
            locale_ev(
                code,
                v,
                default=draw(st.booleans()),
                active=draw(st.booleans()),
                web=draw(st.booleans()),
                position=draw(st.integers(0, 2)),
            )
            for v in draw(versions)
        ]
    for ticker in ("BTC", "ETH"):
        events += [token_ev(ticker, v, rank=draw(st.sampled_from([None, 1, 7]))) for v in draw(versions)]
    for ws in ("ws1", "ws2"):
        events += [workspace_ev(ws, v, status=draw(st.sampled_from(["active", "suspended"]))) for v in draw(versions)]
    events += [
        api_key_ev("k1", draw(st.sampled_from(["ws1", "ws2"])), v, revoked=draw(st.booleans())) for v in draw(versions)
    ]
    events += [
        embed_ev("bdg_0001", draw(st.sampled_from(["ws1", "ws2"])), v, kind=draw(st.sampled_from(["badge", "widget"])))
        for v in draw(versions)
    ]
    events += [
        heartbeat_ev("bdg_0001", "ws1", t) for t in draw(st.lists(st.sampled_from(TIMES), min_size=1, max_size=3))
    ]
    return events


def partition_of(event) -> tuple[str, int]:
    return f"t.{event.topic.suffix}", zlib.crc32(entity_key(event).encode()) % PARTITIONS


def latest_only(events) -> list:
    best = {}
    for ev in events:
        key = entity_key(ev)
        if key not in best or ev.version > best[key].version:
            best[key] = ev
    return list(best.values())


def visible_part(model: dict) -> dict:
    """What partners can read: hidden translation rows are the projector's memory only."""
    return {**model, "post_translations": [r for r in model["post_translations"] if r["visible"]]}


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.large_base_example],
)
@given(events=histories(), data=st.data())
async def test_any_delivery_of_any_history_projects_the_latest_versions(db, events, data):
    # The log: per partition, every event in a random order, some twice, plus one poison record.
    logs: dict[tuple[str, int], list] = {}
    for ev in data.draw(st.permutations(events), label="log order"):
        logs.setdefault(partition_of(ev), []).append(ev)
        if data.draw(st.integers(0, 5), label="duplicate") == 0:
            logs[partition_of(ev)].append(ev)
    poisoned = data.draw(st.sampled_from(sorted(logs)), label="poisoned partition")
    logs[poisoned].insert(data.draw(st.integers(0, len(logs[poisoned])), label="poison at"), b"\x00garbage")
    log_records = {tp: records(evs) for tp, evs in logs.items()}

    # Delivered in random batches, interleaved across partitions, with replays from earlier offsets.
    await reset(db, "rm")
    progress = {tp: 0 for tp in log_records}
    while pending := sorted(tp for tp, pos in progress.items() if pos < len(log_records[tp])):
        tp = data.draw(st.sampled_from(pending), label="partition")
        start, size = progress[tp], data.draw(st.integers(1, 6), label="batch size")
        if start and data.draw(st.integers(0, 4), label="replay?") == 4:
            # A redelivery from an earlier offset: a restart, a rebalance, or a racing consumer's stale batch.
            start = data.draw(st.integers(0, start - 1), label="replay from")
        await apply_batch(db, tp[0], tp[1], log_records[tp][start : start + size])
        progress[tp] = max(progress[tp], min(start + size, len(log_records[tp])))
    for tp, recs in sorted(log_records.items()):  # a late, stale batch from a consumer that lost the partition
        start = data.draw(st.integers(0, len(recs) - 1), label="late batch from")
        await apply_batch(db, tp[0], tp[1], recs[start : start + data.draw(st.integers(1, 6), label="late batch size")])
    delivered = await read_model(db, "rm")
    delivered_announcements = await announcements(db, "rm")
    dead = await db.fetch('SELECT topic, partition, "offset" FROM rm.dead_letters')
    assert [(r["topic"], r["partition"]) for r in dead] == [poisoned]
    positions = {(r["topic"], r["partition"]): r["next_offset"] for r in await db.fetch("SELECT * FROM rm.positions")}
    assert positions == {tp: len(recs) for tp, recs in log_records.items()}

    # The same log, one record per batch, partition after partition.
    await reset(db, "one_by_one")
    for tp, recs in sorted(log_records.items()):
        for rec in recs:
            await apply_batch(db, tp[0], tp[1], [rec])
    assert comparable(delivered) == comparable(await read_model(db, "one_by_one"))
    assert delivered_announcements == await announcements(db, "one_by_one")

    # Each entity's latest version alone.
    await reset(db, "latest")
    latest = latest_only(events)
    for offset, ev in enumerate(latest):
        topic, partition = partition_of(ev)
        await apply_batch(db, topic, partition, [ConsumedRecord(offset, None, records([ev])[0].value)])
    assert visible_part(delivered) == visible_part(await read_model(db, "latest"))

    # The derived counters, from scratch.
    expected_counts, expected_buckets = await derived_from_scratch(db, "rm")
    assert delivered["ticker_post_counts"] == expected_counts
    assert delivered["sentiment_buckets"] == expected_buckets
