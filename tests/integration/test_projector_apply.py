"""apply_batch against the real PostgreSQL: poison events, redelivery, stale versions, derived counters."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import orjson

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
from tests.support.pgbouncer import routed_pool
from tests.support.readmodel import announcements, read_model
from tickerwire.schemas.topics import topic_name
from tickerwire.services.api.catalog import Catalog
from tickerwire.services.projector.apply import BatchResult, apply_batch
from tickerwire.services.readmodel.migrate import migrate

TOPIC = "t.posts.v1"


async def on_home_topics(conn, events, partition: int = 0) -> list[BatchResult]:
    """Apply ``events`` in order, each run of events of one topic (the registry's) as one batch
    at that topic's next offset."""
    results = []
    for topic, run in itertools.groupby(events, key=lambda e: topic_name("t", type(e).topic)):
        start = await conn.fetchval(
            "SELECT next_offset FROM positions WHERE topic = $1 AND partition = $2", topic, partition
        )
        results.append(await apply_batch(conn, topic, partition, records(list(run), start=start or 0)))
    return results


async def counts(conn) -> dict[str, int]:
    return {
        r["ticker"]: r["post_count"] for r in await conn.fetch("SELECT * FROM ticker_post_counts WHERE post_count > 0")
    }


async def buckets(conn) -> dict[tuple[datetime, str], int]:
    return {
        (r["bucket"], r["sentiment"]): r["count"]
        for r in await conn.fetch("SELECT * FROM sentiment_buckets WHERE count > 0")
    }


# --------------------------------------------------------------------------- tests


async def test_poison_records_are_dead_lettered_and_the_events_after_them_projected(conn):
    schema_violation = orjson.dumps(
        {"type": "post", "version": 1, "emitted_at": "2026-01-01T00:00:00Z", "data": {"id": -5}}
    )
    batch = records(
        [
            post_ev(1),
            b"\xff{not json",
            orjson.dumps({"type": "wallet", "version": 1}),
            schema_violation,
            None,  # a tombstone
            post_ev(2),
            token_ev("BTC"),
        ],
        start=100,
    )
    result = await apply_batch(conn, TOPIC, 3, batch)

    dead = await conn.fetch(
        'SELECT topic, partition, "offset", value, reason_kind, reason FROM dead_letters ORDER BY "offset"'
    )
    assert [(r["topic"], r["partition"], r["offset"], r["reason_kind"]) for r in dead] == [
        (TOPIC, 3, 101, "undecodable"),
        (TOPIC, 3, 102, "unknown_type"),
        (TOPIC, 3, 103, "schema"),
        (TOPIC, 3, 104, "undecodable"),
        (TOPIC, 3, 106, "wrong_topic"),  # a token event belongs on the catalog topic
    ]
    assert [r["value"] for r in dead] == [b"\xff{not json", batch[2].value, schema_violation, None, batch[6].value]
    assert "wallet" in dead[1]["reason"] and "data.id" in dead[2]["reason"] and "tombstone" in dead[3]["reason"]
    assert dead[4]["reason"] == f"a token event belongs on the catalog.v1 topic, not on {TOPIC}"
    assert sorted(d.kind for d in result.dead) == [
        "schema",
        "undecodable",
        "undecodable",
        "unknown_type",
        "wrong_topic",
    ]
    assert [r["id"] for r in await conn.fetch("SELECT id FROM posts ORDER BY id")] == [1, 2]
    assert await conn.fetchval("SELECT count(*) FROM tokens") == 0
    assert await conn.fetchval("SELECT next_offset FROM positions WHERE topic = $1 AND partition = 3", TOPIC) == 107


async def test_a_post_on_the_catalog_topic_is_set_aside_not_applied(conn):
    """Applied, it would be listed but never pushed: the stream reads only the posts topic."""
    result = await apply_batch(conn, "t.catalog.v1", 0, records([post_ev(9), token_ev("BTC")]))
    assert [(d.offset, d.kind) for d in result.dead] == [(0, "wrong_topic")]
    assert "a post event belongs on the posts.v1 topic, not on t.catalog.v1" == result.dead[0].reason
    assert await conn.fetchval("SELECT count(*) FROM posts") == 0
    assert await conn.fetchval("SELECT count(*) FROM tokens") == 1
    assert await conn.fetchval("SELECT reason_kind FROM dead_letters WHERE topic = 't.catalog.v1'") == "wrong_topic"


async def test_redelivered_and_overlapping_batches_change_nothing(conn):
    history = [
        locale_ev("en-US", default=True),
        category_ev("markets"),
        category_ev("btc", group="markets"),
        post_ev(1, tickers=("BTC", "ETH"), categories=("btc",)),
        post_ev(2, sentiment="BEARISH"),
        token_ev("ETH"),
        workspace_ev("ws1"),
        b"poison",
    ]
    batch = records(history)
    await apply_batch(conn, TOPIC, 0, batch[:5])
    await apply_batch(conn, TOPIC, 0, batch[5:])
    before = (
        await read_model(conn),
        await announcements(conn),
        await conn.fetch("SELECT * FROM positions"),
        await conn.fetch("SELECT * FROM change_stamps ORDER BY name"),
        await conn.fetch('SELECT topic, partition, "offset", received_at FROM dead_letters'),
    )

    again = await apply_batch(conn, TOPIC, 0, batch)  # the whole history again, e.g. after a rebalance
    overlap = await apply_batch(conn, TOPIC, 0, batch[3:])
    assert again.skipped_redelivered == len(batch) and overlap.skipped_redelivered == len(batch) - 3
    assert not again.applied and not overlap.applied and not again.dead
    after = (
        await read_model(conn),
        await announcements(conn),
        await conn.fetch("SELECT * FROM positions"),
        await conn.fetch("SELECT * FROM change_stamps ORDER BY name"),
        await conn.fetch('SELECT topic, partition, "offset", received_at FROM dead_letters'),
    )
    assert after == before
    assert await counts(conn) == {"BTC": 2, "ETH": 1}


async def test_an_older_version_after_a_newer_one_changes_nothing(conn):
    newer = [
        locale_ev("en-US", 5, default=True),
        category_ev("markets", 5),
        token_ev("BTC", 5),
        post_ev(1, 5, tickers=("ETH",)),
        workspace_ev("ws1", 5),
        api_key_ev("k1", "ws1", 5),
        embed_ev("bdg_0001", "ws1", 5),
        heartbeat_ev("bdg_0001", "ws1", T0),
    ]
    older = [
        locale_ev("en-US", 4, default=False),
        category_ev("markets", 4),
        token_ev("BTC", 4),
        post_ev(1, 4, tickers=("SOL",), status="retracted"),
        workspace_ev("ws1", 4, status="suspended"),
        api_key_ev("k1", "ws1", 4, revoked=True),
        embed_ev("bdg_0001", "ws2", 4),
        heartbeat_ev("bdg_0001", "ws1", T0 - timedelta(hours=5)),
        post_ev(1, 5, tickers=("XRP",)),
    ]  # an equal version does not replace either
    await on_home_topics(conn, newer)
    before = (await read_model(conn), await announcements(conn))
    results = await on_home_topics(conn, older)
    assert not any(r.applied for r in results) and not any(r.dead for r in results)
    assert sum(r.stale for r in results) >= 4  # posts, categories and locales report what they ignored
    assert (await read_model(conn), await announcements(conn)) == before
    assert await counts(conn) == {"ETH": 1}


async def test_post_count_and_sentiment_buckets_follow_every_change(conn):
    t1 = T0 + timedelta(minutes=5, seconds=30)
    steps = [
        (post_ev(1, 1, tickers=("BTC", "ETH", "BTC")), {"BTC": 1, "ETH": 1}, {(T0, "BULLISH"): 1}),
        (post_ev(1, 2, tickers=("ETH", "SOL")), {"ETH": 1, "SOL": 1}, {(T0, "BULLISH"): 1}),
        (post_ev(1, 3, tickers=("ETH", "SOL"), sentiment="BEARISH"), {"ETH": 1, "SOL": 1}, {(T0, "BEARISH"): 1}),
        (
            post_ev(1, 4, tickers=("ETH", "SOL"), sentiment="BEARISH", at=t1),
            {"ETH": 1, "SOL": 1},
            {(t1.replace(second=0), "BEARISH"): 1},
        ),
        (post_ev(1, 5, tickers=("ETH",), status="retracted", at=t1), {}, {}),
        (post_ev(1, 6, tickers=("ETH",), status="queued", at=None), {"ETH": 1}, {}),  # live, not yet visible
        (post_ev(1, 7, tickers=("ETH",), status="partial", sentiment="NEUTRAL"), {"ETH": 1}, {(T0, "NEUTRAL"): 1}),
        (post_ev(1, 8, tickers=("ETH",), status="draft", at=None), {}, {}),
        (post_ev(1, 9, tickers=("ETH",), status="failed", at=None), {}, {}),
    ]
    for offset, (event, want_counts, want_buckets) in enumerate(steps):
        await apply_batch(conn, TOPIC, 0, records([event], start=offset))
        assert await counts(conn) == want_counts, event.version
        assert await buckets(conn) == want_buckets, event.version
    # A second post shares the counters; collapsing versions inside one batch moves them the same.
    await apply_batch(
        conn, TOPIC, 1, records([post_ev(2, 1, tickers=("ETH",)), post_ev(2, 2, tickers=("BTC",), sentiment="BEARISH")])
    )
    assert await counts(conn) == {"BTC": 1}
    assert await buckets(conn) == {(T0, "BEARISH"): 1}


async def test_announcements_do_not_depend_on_how_the_log_is_batched(conn):
    history = [
        post_ev(1, 1, status="draft", at=None, langs=("en-US", "de-DE")),
        post_ev(1, 2, langs=("en-US", "de-DE")),  # first visible: announces en-US and de-DE here
        post_ev(1, 3, langs=("en-US", "de-DE", "fr-FR")),  # fr-FR first shown here
        post_ev(1, 2, langs=("en-US", "es-ES")),  # stale: announces nothing
        post_ev(1, 4, status="retracted", langs=("en-US",)),
        post_ev(1, 5, langs=("en-US", "es-ES")),  # es-ES first shown here
    ]
    await migrate(conn, "rm_b")
    await conn.execute("SET search_path TO rm, public")
    await apply_batch(conn, TOPIC, 2, records(history))  # one batch, in rm
    one_batch = await announcements(conn, "rm")
    await conn.execute("SET search_path TO rm_b, public")
    for offset, event in enumerate(history):  # one event per batch, in rm_b
        await apply_batch(conn, TOPIC, 2, records([event], start=offset))
    assert (
        await announcements(conn, "rm_b")
        == one_batch
        == {(1, "en-US"): (2, 1), (1, "de-DE"): (2, 1), (1, "fr-FR"): (2, 2), (1, "es-ES"): (2, 5)}
    )
    assert await read_model(conn, "rm_b") == await read_model(conn, "rm")
    visible = await conn.fetch("SELECT lang FROM post_translations WHERE visible ORDER BY lang")
    assert [r["lang"] for r in visible] == ["en-US", "es-ES"]  # dropped locales stay, hidden


async def test_category_and_default_locale_changes_rerender_stored_posts(conn):
    await on_home_topics(
        conn,
        [
            locale_ev("en-US", default=True),
            locale_ev("de-DE"),
            post_ev(1, categories=("btc",), langs=("en-US", "de-DE")),  # its category arrives later
        ],
    )
    lean = lambda rows: {r["lang"]: orjson.loads(r["lean"])["categories"] for r in rows}  # noqa: E731
    rows = await conn.fetch("SELECT lang, lean, category_slugs FROM post_translations ORDER BY lang")
    assert lean(rows) == {"de-DE": [{"slug": "btc", "name": "btc"}], "en-US": [{"slug": "btc", "name": "btc"}]}

    await on_home_topics(
        conn,
        [
            category_ev("markets"),
            category_ev("btc", group="markets", names={"en-US": "Bitcoin", "fr-FR": "Le Bitcoin"}),
        ],
    )
    rows = await conn.fetch("SELECT lang, lean, category_slugs FROM post_translations ORDER BY lang")
    assert lean(rows) == {"de-DE": [{"slug": "btc", "name": "Bitcoin"}], "en-US": [{"slug": "btc", "name": "Bitcoin"}]}
    assert all(r["category_slugs"] == ["btc", "markets"] for r in rows)

    # French becomes the default: German falls back to the French name now.
    await on_home_topics(conn, [locale_ev("en-US", 2), locale_ev("fr-FR", 1, default=True)])
    rows = await conn.fetch("SELECT lang, lean FROM post_translations ORDER BY lang")
    assert lean(rows) == {
        "de-DE": [{"slug": "btc", "name": "Le Bitcoin"}],
        "en-US": [{"slug": "btc", "name": "Bitcoin"}],
    }


async def test_the_text_vector_is_computed_only_when_the_searchable_text_changes(conn):
    await on_home_topics(conn, [locale_ev("en-US", default=True), post_ev(1, categories=("btc",))])
    # Mark the stored vector: a statement that recomputed it would overwrite the mark.
    await conn.execute("UPDATE post_translations SET tsv = 'marked'::tsvector")
    await on_home_topics(conn, [category_ev("btc", names={"en-US": "Bitcoin"})])  # re-renders the post
    row = await conn.fetchrow("SELECT tsv::text AS tsv, lean FROM post_translations")
    assert orjson.loads(row["lean"])["categories"] == [{"slug": "btc", "name": "Bitcoin"}] and row["tsv"] == "'marked'"
    await on_home_topics(conn, [post_ev(1, 2, categories=("btc",))])  # the title changes
    row = await conn.fetchrow("SELECT tsv::text AS tsv, tsv_title::text AS title FROM post_translations")
    assert "marked" not in row["tsv"] and "'v2':4A" in row["title"]
    # A locale's partial text indexes exist as soon as the locale is stored.
    names = {r["indexname"] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = 'rm'")}
    assert {n for n in names if n.startswith("pt_search_") and "en_us" in n} and not {n for n in names if "de_de" in n}


async def test_post_and_catalog_agree_on_category_names_without_a_flagged_default(conn, fresh_db):
    """No locale flagged default and en-US not listed: the default is the first listed locale for
    the projector (names inside posts) and the API's catalog (/categories) alike."""
    await on_home_topics(
        conn,
        [
            locale_ev("fr-FR", position=0),
            locale_ev("de-DE", position=1),
            locale_ev("en-US", active=False, position=2),
            category_ev("markets", names={"en-US": "Markets", "fr-FR": "Marchés"}),
            category_ev("btc", group="markets", names={"en-US": "Bitcoin", "fr-FR": "Le Bitcoin"}),
            post_ev(1, categories=("btc",), langs=("de-DE",)),
        ],
    )
    lean = orjson.loads(await conn.fetchval("SELECT lean FROM post_translations WHERE lang = 'de-DE'"))
    catalog = Catalog(log_topic=TOPIC)
    pool = await routed_pool(fresh_db, "rm", min_size=1, max_size=1)  # as the API's, through PgBouncer if any
    try:
        await catalog.refresh(pool)
    finally:
        await pool.close()
    assert catalog.languages.resolve(None) == "fr-FR"
    listed = orjson.loads(catalog.categories.by_slug[("btc", "de-DE")].data)
    assert lean["categories"] == [{"slug": "btc", "name": "Le Bitcoin"}]
    assert listed["name"] == "Le Bitcoin" and listed["group"] == {"slug": "markets", "name": "Marchés"}

    # en-US listed again: it is the default now, and the stored post is re-rendered to match.
    await on_home_topics(conn, [locale_ev("en-US", 2, position=2)])
    lean = orjson.loads(await conn.fetchval("SELECT lean FROM post_translations WHERE lang = 'de-DE'"))
    assert lean["categories"] == [{"slug": "btc", "name": "Bitcoin"}]


async def test_array_columns_of_a_batch_read_back_as_written(conn):
    # A batch's rows travel as one array per column; an array column as PostgreSQL's text form
    # of it, which must carry quotes, backslashes, commas, braces, spaces and NULL unchanged.
    odd = ('a"b', "c\\d", "e,f", "{g}", "NULL", "ü h", " ")
    events = [post_ev(i, hashtags=odd if i == 2 else (), tickers=("BTC", "ETH") if i == 3 else ()) for i in (1, 2, 3)]
    await on_home_topics(conn, [locale_ev("en-US", default=True), *events])
    rows = {r["post_id"]: r for r in await conn.fetch("SELECT post_id, hashtags, tickers FROM post_translations")}
    posts = {r["id"]: r for r in await conn.fetch("SELECT id, tickers, snapshot FROM posts")}
    assert rows[1]["hashtags"] == [] and rows[1]["tickers"] == [] and posts[1]["tickers"] == []
    assert (
        rows[2]["hashtags"] == [t.lower() for t in odd] and rows[3]["tickers"] == ["BTC", "ETH"] == posts[3]["tickers"]
    )
    assert orjson.loads(posts[2]["snapshot"])["hashtags"] == list(odd)
