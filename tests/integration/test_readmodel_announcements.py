"""Committed post.created announcements: a translation is announced for exactly the record
that first made it visible, only while it is visible, and only in a locale the API answers in;
the live stream's reader and the replay's (``cursors.read_changes``) read the same ones."""

from __future__ import annotations

import operator

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.events import locale_ev, post_ev, records
from tests.support.readmodel import reset
from tickerwire.schemas.models import PostEvent
from tickerwire.services.projector.apply import apply_batch
from tickerwire.services.readmodel import cursors
from tickerwire.services.readmodel.announcements import Announcement, announced
from tickerwire.services.readmodel.taxonomy import served_locales

INSERT = """
INSERT INTO post_translations (post_id, lang, slug, published_at, importance, sentiment, visible, category_slugs,
                               tickers, hashtags, tsv, lean, detail, announced_partition, announced_offset)
VALUES ($1, $2, 'a-slug', now(), 1, 'neutral', $3, ARRAY['defi'], ARRAY['BTC'], ARRAY[]::text[],
        to_tsvector('simple', 'x'), $4, '{}', $5, $6)
"""


LOCALE = """
INSERT INTO locales (code, version, name, native_name, country_code, direction, active, web_channel, is_default, position)
VALUES ($1, 1, $1, $1, 'XX', 'ltr', $2, true, $1 = 'en-US', 0)
"""


async def test_the_announcements_of_projected_records_in_log_order(conn):
    for code in ("en-US", "de-DE"):
        await conn.execute(LOCALE, code, True)
    await conn.execute(INSERT, 1, "en-US", True, '{"id":1}', 0, 7)
    await conn.execute(INSERT, 1, "de-DE", True, '{"id":1,"de":1}', 0, 7)
    await conn.execute(INSERT, 2, "en-US", True, '{"id":2}', 1, 3)
    await conn.execute(INSERT, 3, "en-US", False, '{"id":3}', 0, 8)  # hidden since: not announced
    await conn.execute(INSERT, 4, "en-US", True, '{"id":4}', 0, 2)  # first shown by another record

    found = await announced(conn, [(2, 1, 3), (1, 0, 7), (3, 0, 8), (4, 0, 9)])

    assert found == [
        Announcement(0, 7, "de-DE", '{"id":1,"de":1}', ("BTC",), ("defi",)),
        Announcement(0, 7, "en-US", '{"id":1}', ("BTC",), ("defi",)),
        Announcement(1, 3, "en-US", '{"id":2}', ("BTC",), ("defi",)),
    ]
    assert await announced(conn, []) == []


async def test_a_translation_in_a_locale_the_api_does_not_answer_in_is_not_announced(conn):
    await conn.execute(LOCALE, "en-US", True)
    await conn.execute(LOCALE, "pt-BR", True)
    await conn.execute(LOCALE, "pl-PL", False)  # inactive: /posts?lang=pl-PL answers en-US
    for lang in ("en-US", "pt-br", "pl-PL", "xx-YY"):
        await conn.execute(INSERT, 1, lang, True, f'{{"lang":"{lang}"}}', 0, 7)

    found = await announced(conn, [(1, 0, 7)])

    assert [a.lang for a in found] == ["en-US", "pt-br"]  # tags compare case-insensitively


async def test_with_no_locale_listed_the_default_en_us_is_still_announced(conn):
    await conn.execute(INSERT, 1, "en-US", True, '{"id":1}', 0, 7)
    await conn.execute(INSERT, 1, "de-DE", True, '{"id":1,"de":1}', 0, 7)

    assert [a.lang for a in await announced(conn, [(1, 0, 7)])] == ["en-US"]


# --------------------------------------------------------------------------- live and replay read alike

TOPIC = "t.posts.v1"
PARTITIONS = 2
#: Listed (en-US the default, pt-BR written lower-case by some posts), inactive, and unknown.
LOCALES = [locale_ev("en-US", default=True), locale_ev("de-DE"), locale_ev("pt-BR"), locale_ev("pl-PL", active=False)]
POST_LANGS = ("en-US", "de-DE", "pt-br", "pl-PL", "xx-YY")
STATUSES = ("draft", "queued", "published", "partial", "retracted")


@st.composite
def posts_log(draw) -> dict[int, list[PostEvent]]:
    """Versions of a few posts (statuses and locales changing, versions out of order, repeats),
    spread over the partitions by post id."""
    logs: dict[int, list[PostEvent]] = {p: [] for p in range(PARTITIONS)}
    for post_id in range(1, 5):
        versions = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
        for v in versions:
            langs = draw(st.lists(st.sampled_from(POST_LANGS), min_size=1, max_size=3, unique=True))
            logs[post_id % PARTITIONS].append(post_ev(post_id, v, status=draw(st.sampled_from(STATUSES)), langs=langs))
    return logs


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(logs=posts_log(), data=st.data())
async def test_the_live_reader_and_the_replay_read_the_same_announcements(db, logs, data):
    await reset(db, "rm")
    await apply_batch(db, "t.catalog.v1", 0, records(LOCALES))
    for partition, events in logs.items():
        recs = records(events)
        for start in range(0, len(recs), 3):
            await apply_batch(db, TOPIC, partition, recs[start : start + 3])
    projected = [
        (event.data.id, partition, offset) for partition, events in logs.items() for offset, event in enumerate(events)
    ]
    served = await served_locales(db)
    key = operator.attrgetter("partition", "offset", "lang")

    live = await announced(db, projected)
    replay = await cursors.read_changes(db, TOPIC, {}, served, limit=10_000)
    assert live == sorted(live, key=key)
    assert sorted(replay.items, key=key) == live
    assert {a.lang.lower() for a in live} <= served

    # Any records of one partition, and the range of positions they span.
    partition = data.draw(st.sampled_from(range(PARTITIONS)), label="partition")
    n = len(logs[partition])
    lo = data.draw(st.integers(0, max(n - 1, 0)), label="from")
    hi = data.draw(st.integers(lo, max(n - 1, lo)), label="to")
    some = [r for r in projected if r[1] == partition and lo <= r[2] <= hi]
    bounded = await cursors.read_changes(
        db, TOPIC, {partition: (lo, "")}, served, limit=10_000, upto={partition: (hi + 1, "")}
    )
    assert await announced(db, some) == sorted(bounded.items, key=key)
    assert bounded.items == [a for a in replay.items if a.partition == partition and lo <= a.offset <= hi]
