"""The seeded demo dataset and the post trickle: pure generation logic, no I/O."""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from tickerwire.devstack.demo.dataset import (
    DEFAULT_LOCALE,
    LISTED_LOCALES,
    LOCALES,
    access_events,
    catalog_events,
    generate,
    post_events,
    ticker_pool,
)
from tickerwire.devstack.demo.trickle import Newsroom, next_post, run_trickle
from tickerwire.schemas.export import EVENTS_DIR
from tickerwire.schemas.models import (
    ECOSYSTEM_SLUGS,
    EVENT_VERSIONS,
    EXCHANGE_KEYS,
    VISIBLE_STATUSES,
    PostStatus,
    Sentiment,
    decode_event,
    encode_event,
)
from tickerwire.services.readmodel.upcast import upcast

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
TICKER_RE = re.compile(r"^[A-Z0-9][A-Z0-9.\-]{0,19}$")
KEY_HASH = "ab" * 32


@pytest.fixture(scope="module")
def events():
    return generate(now=NOW)


@pytest.fixture(scope="module")
def posts(events):
    return [e.data for e in events if e.type == "post"]


@pytest.fixture(scope="module")
def tokens(events):
    return [e.data for e in events if e.type == "token"]


@pytest.fixture(scope="module")
def categories(events):
    return [e.data for e in events if e.type == "category"]


def encoded(events):
    return [encode_event(e) for e in events]


# --------------------------------------------------------------------------- determinism


def test_same_seed_and_now_give_identical_events(events):
    assert encoded(generate(now=NOW)) == encoded(events)


def test_a_different_seed_gives_different_tokens_and_posts():
    seven = generate(7, now=NOW, posts=50, tokens=300)
    eight = generate(8, now=NOW, posts=50, tokens=300)
    tickers = [{e.data.ticker for e in run if e.type == "token"} for run in (seven, eight)]
    bodies = [[e.data.translations[0].body for e in run if e.type == "post"] for run in (seven, eight)]
    assert tickers[0] != tickers[1]
    assert bodies[0] != bodies[1]


def test_a_smaller_catalog_is_a_prefix_of_the_full_one(tokens):
    small = [e.data for e in catalog_events(now=NOW, tokens=400) if e.type == "token"]
    assert small == tokens[:400]


def test_generate_is_the_catalog_followed_by_the_posts():
    parts = [*catalog_events(now=NOW, tokens=200), *post_events(now=NOW, posts=100)]
    assert encoded(generate(now=NOW, posts=100, tokens=200)) == encoded(parts)


def test_events_come_in_publishing_order(events):
    kinds = [e.type for e in events]
    order = ["locale", "category", "token", "post"]
    assert kinds == sorted(kinds, key=order.index)
    assert set(kinds) == set(order)


def test_every_event_round_trips_through_the_log_encoding(events):
    access = access_events(now=NOW, key_hash=KEY_HASH, display_prefix="tw_test_abcd")
    for event in [*events, *access]:
        assert decode_event(encode_event(event)) == event


# --------------------------------------------------------------------------- locales


def test_sixteen_locales_of_which_fourteen_are_listed():
    listed = [loc for loc in LOCALES if loc.active and loc.web_channel]
    assert len(LOCALES) == 16
    assert len({loc.code for loc in LOCALES}) == 16
    assert [loc.code for loc in listed] == list(LISTED_LOCALES)
    assert len(listed) == 14


def test_exactly_one_default_locale_and_it_is_listed_ltr_english():
    defaults = [loc for loc in LOCALES if loc.is_default]
    assert [loc.code for loc in defaults] == [DEFAULT_LOCALE] == ["en-US"]
    assert defaults[0].direction == "ltr"
    assert DEFAULT_LOCALE in LISTED_LOCALES


def test_listed_locales_include_a_right_to_left_one():
    assert any(loc.direction == "rtl" for loc in LOCALES if loc.code in LISTED_LOCALES)
    assert "ar-SA" in LISTED_LOCALES


def test_the_unlisted_locales_are_one_inactive_and_one_not_wired_to_web():
    unlisted = [loc for loc in LOCALES if loc.code not in LISTED_LOCALES]
    assert len(unlisted) == 2
    assert sum(not loc.active for loc in unlisted) == 1
    assert sum(loc.active and not loc.web_channel for loc in unlisted) == 1


# --------------------------------------------------------------------------- categories


def test_taxonomy_is_seven_groups_of_five_leaves(categories):
    groups = [c for c in categories if c.is_group]
    leaves = [c for c in categories if not c.is_group]
    assert len(groups) == 7
    assert len(leaves) == 35
    assert Counter(c.group_slug for c in leaves) == {g.slug: 5 for g in groups}


def test_category_slugs_share_one_namespace_apart_from_ecosystems(categories):
    slugs = [c.slug for c in categories]
    assert len(set(slugs)) == len(slugs) == 42
    assert all(SLUG_RE.match(s) for s in slugs)
    assert not set(slugs) & set(ECOSYSTEM_SLUGS)


def test_each_group_is_published_before_its_leaves(categories):
    seen = set()
    for cat in categories:
        assert cat.is_group or cat.group_slug in seen
        seen.add(cat.slug)


def test_category_positions_order_siblings(categories):
    by_parent: dict[str | None, list[int]] = {}
    for cat in categories:
        by_parent.setdefault(cat.group_slug, []).append(cat.position)
    assert all(sorted(p) == list(range(len(p))) for p in by_parent.values())


def test_category_names_exist_in_all_sixteen_locales_and_differ_across_listed_ones(categories):
    codes = {loc.code for loc in LOCALES}
    for cat in categories:
        assert set(cat.names) == codes
        listed_names = [cat.names[code] for code in LISTED_LOCALES]
        assert len(set(listed_names)) == len(LISTED_LOCALES), cat.slug


# --------------------------------------------------------------------------- tokens


def test_three_thousand_tokens_with_unique_valid_tickers(tokens):
    tickers = [t.ticker for t in tokens]
    assert len(tokens) == 3000
    assert len(set(tickers)) == 3000
    assert all(TICKER_RE.match(t) for t in tickers)
    assert {"BTC", "ETH", "SOL", "BNB", "XRP", "USDT", "USDC", "DOGE", "ADA"} <= set(tickers)


def test_ranks_are_unique_and_consecutive_from_one(tokens):
    ranks = [t.market_cap_rank for t in tokens if t.market_cap_rank is not None]
    assert sorted(ranks) == list(range(1, len(ranks) + 1))
    assert tokens[0].ticker == "BTC" and tokens[0].market_cap_rank == 1


def test_some_tokens_are_unranked_exchange_only_rows(tokens):
    unranked = [t for t in tokens if t.market_cap_rank is None]
    assert len(unranked) > 100
    assert sum(bool(t.exchange_listings) for t in unranked) > len(unranked) / 2


def test_exchange_listings_cover_empty_and_subsets_of_the_nine_keys(tokens):
    listings = [t.exchange_listings for t in tokens]
    assert any(not ls for ls in listings)
    assert any(ls and len(ls) < 9 for ls in listings)
    assert any(len(ls) == 9 for ls in listings)
    assert {key for ls in listings for key in ls} == set(EXCHANGE_KEYS)
    assert all(len(set(ls)) == len(ls) for ls in listings)


def test_upstream_categories_are_empty_for_some_tokens(tokens):
    assert any(not t.categories for t in tokens)
    assert any(t.categories for t in tokens)


def test_genesis_date_is_null_for_most_tokens_and_never_after_now(tokens):
    dated = [t.genesis_date for t in tokens if t.genesis_date is not None]
    assert len(dated) < len(tokens) / 2
    assert dated and max(dated) <= NOW.date()


def test_primary_ecosystem_is_null_for_multichain_stablecoins_and_uses_every_slug(tokens):
    by_ticker = {t.ticker: t for t in tokens}
    assert by_ticker["USDT"].primary_ecosystem is None
    assert by_ticker["USDC"].primary_ecosystem is None
    assert by_ticker["BTC"].primary_ecosystem.slug == "ecosystems-bitcoin"
    assert {t.primary_ecosystem.slug for t in tokens if t.primary_ecosystem} == set(ECOSYSTEM_SLUGS)
    assert all(t.primary_ecosystem.name for t in tokens if t.primary_ecosystem)


def test_description_is_null_for_some_tokens(tokens):
    assert any(t.description is None for t in tokens)
    assert any(t.description for t in tokens)


def test_homepage_and_logo_are_always_https(tokens):
    assert all(t.homepage_url.startswith("https://") for t in tokens)
    assert all(t.logo_url.startswith("https://") for t in tokens)


# --------------------------------------------------------------------------- posts


def test_at_least_two_thousand_posts_with_ids_one_to_n(posts):
    assert len(posts) >= 2000
    assert [p.id for p in posts] == list(range(1, len(posts) + 1))


def test_published_at_strictly_increases_with_id_within_the_last_30_days(posts):
    timed = [p for p in posts if p.published_at is not None]
    times = [p.published_at for p in timed]
    assert all(a < b for a, b in zip(times, times[1:]))
    assert [p.id for p in timed] == sorted(p.id for p in timed)
    assert NOW - timedelta(days=30) < times[0] and times[-1] <= NOW
    assert times[-1] > NOW - timedelta(hours=1)
    assert sum(t > NOW - timedelta(hours=24) for t in times) > 20


def test_every_status_occurs_and_visible_posts_are_timed(posts):
    statuses = Counter(p.status for p in posts)
    assert set(statuses) == set(PostStatus)
    assert statuses[PostStatus.published] > len(posts) * 0.8
    assert statuses[PostStatus.partial] > statuses[PostStatus.queued]
    assert all(p.published_at is not None for p in posts if p.status in VISIBLE_STATUSES)


def test_every_sentiment_occurs_and_importance_spans_the_range(posts):
    assert {p.sentiment for p in posts} == set(Sentiment)
    importance = [p.importance for p in posts]
    assert min(importance) < 10 and max(importance) > 90


def test_posts_file_under_one_to_three_known_leaves(posts, categories):
    leaves = {c.slug for c in categories if not c.is_group}
    assert all(1 <= len(p.categories) <= 3 and set(p.categories) <= leaves for p in posts)
    assert all(len(set(p.categories)) == len(p.categories) for p in posts)


def test_post_tickers_are_catalog_tokens_zero_to_four_favouring_popular_ones(posts, tokens):
    catalog = {t.ticker for t in tokens}
    assert {len(p.tickers) for p in posts} == {0, 1, 2, 3, 4}
    assert all(set(p.tickers) <= catalog and len(set(p.tickers)) == len(p.tickers) for p in posts)
    mentions = Counter(t for p in posts for t in p.tickers)
    top_twenty = {t.ticker for t in tokens[:20]}
    assert sum(n for t, n in mentions.items() if t in top_twenty) > sum(mentions.values()) / 2
    assert len(mentions) > 100


def test_hashtags_number_zero_to_three(posts):
    assert {len(p.hashtags) for p in posts} == {0, 1, 2, 3}


def test_translations_are_in_listed_locales_and_always_english_unless_partial(posts):
    for post in posts:
        langs = [t.lang for t in post.translations]
        assert set(langs) <= set(LISTED_LOCALES)
        if post.status is not PostStatus.partial:
            assert DEFAULT_LOCALE in langs and 3 <= len(langs) <= 8
    assert any(DEFAULT_LOCALE not in {t.lang for t in p.translations} for p in posts if p.status is PostStatus.partial)
    assert {t.lang for p in posts for t in p.translations} == set(LISTED_LOCALES)


def test_slugs_are_valid_and_unique_per_locale_and_overall(posts):
    pairs = [(t.lang, t.slug) for p in posts for t in p.translations]
    assert all(SLUG_RE.match(slug) for _, slug in pairs)
    assert len(set(pairs)) == len(pairs)
    assert len({slug for _, slug in pairs}) == len(pairs)


def test_canonical_urls_name_the_locale_and_the_slug(posts):
    for post in posts:
        for tr in post.translations:
            assert tr.canonical_url == f"https://news.tickerwire.example/{tr.lang}/{tr.slug}"


def test_bodies_are_three_to_six_plain_paragraphs(posts):
    for post in posts:
        for tr in post.translations:
            paragraphs = tr.body.split("\n\n")
            assert 3 <= len(paragraphs) <= 6
            assert all(p.strip() == p and p and "\n" not in p for p in paragraphs)
            assert "<" not in tr.body and "**" not in tr.body and "](" not in tr.body


def test_translations_are_localized_text(posts):
    for post in posts[:200]:
        titles = [t.title for t in post.translations]
        bodies = [t.body for t in post.translations]
        assert len(set(titles)) == len(titles)
        assert len(set(bodies)) == len(bodies)


def test_the_lede_adds_a_second_topic_to_the_headline(posts):
    for post in posts:
        for tr in post.translations:
            if tr.lang == "en-US":
                watched = tr.lede.split(" watching ", 1)[1].removesuffix(" closely.")
                assert watched not in tr.title, tr.lede


def test_english_text_varies_enough_for_full_text_search(posts):
    bodies = [t.body.lower() for p in posts for t in p.translations if t.lang == "en-US"]
    for word in ("halving", "staking", "etf", "liquidity", "regulation", "whale"):
        share = sum(word in body for body in bodies) / len(bodies)
        assert 0.05 < share < 0.95, word
    assert len({t.title for p in posts for t in p.translations if t.lang == "en-US"}) > len(bodies) * 0.9


# --------------------------------------------------------------------------- access


def test_access_events_make_one_active_workspace_that_can_read():
    workspace, key, embed, heartbeat = access_events(now=NOW, key_hash=KEY_HASH, display_prefix="tw_test_abcd")
    assert workspace.type == "workspace" and workspace.data.status == "active"
    assert (
        workspace.data.rate_limit_per_minute,
        workspace.data.daily_quota,
        workspace.data.stream_connection_limit,
    ) == (None, None, None)
    assert key.type == "api_key" and key.data.issued_at == NOW and key.data.revoked_at is None
    assert key.data.workspace_id == embed.data.workspace_id == heartbeat.data.workspace_id == workspace.data.id
    assert embed.type == "embed" and embed.data.kind == "badge"
    assert heartbeat.type == "heartbeat" and heartbeat.data.landed_at == NOW
    assert heartbeat.data.embed_id == embed.data.id
    assert heartbeat.version == int(NOW.timestamp() * 1000)


# --------------------------------------------------------------------------- trickle


def test_next_post_is_published_now_in_the_given_locales():
    event = next_post(random.Random(1), post_id=5001, now=NOW, locales=["en-US", "fr-FR", "ja-JP", "ar-SA"])
    post = event.data
    assert (post.id, post.status, post.published_at, event.emitted_at) == (5001, PostStatus.published, NOW, NOW)
    langs = {t.lang for t in post.translations}
    assert "en-US" in langs and langs <= {"en-US", "fr-FR", "ja-JP", "ar-SA"}
    assert set(post.symbols) <= set(ticker_pool().tickers)
    assert [t.relevance for t in post.tickers][:1] in ([], [1.0])  # the subject, then the others
    assert all(0 < t.relevance <= 1 for t in post.tickers)
    assert decode_event(encode_event(event)) == event


def newest_post_schema() -> int:
    """The newest version of the post event: the models' and the published schema files' alike."""
    published = [int(re.fullmatch(r"post\.v(\d+)\.schema\.json", f.name)[1]) for f in EVENTS_DIR.glob("post.v*.json")]
    assert sorted(published) == sorted(EVENT_VERSIONS["post"])
    return max(published)


async def test_the_trickle_publishes_the_newest_version_of_the_post_event():
    """The demo is traffic of today's publishers: the post event's newest version, which the
    projector's upcaster passes through as it is; an older one would hide a gap in the newest."""
    newest = newest_post_schema()
    newsroom = Newsroom(random.Random(5), start_id=1, locales=LISTED_LOCALES, pool=ticker_pool())
    events = [e for tick in range(200) for e in newsroom.step(NOW + timedelta(seconds=tick))]
    published = await trickled(20, start_id=1, interval_s=0.001)
    assert {e.version > 1 for e in events} == {True, False}  # new posts, landed translations and edits
    for event in [*events, *published]:
        assert event.schema_version == newest, event
        assert upcast(event) is event
        assert orjson.loads(encode_event(event))["schema_version"] == newest
    assert any(e.data.updated_at is not None for e in events)  # an edit says when the story changed


async def trickled(count: int, **trickle) -> list:
    """What :func:`run_trickle` (seed 7, ``trickle``: its other arguments) publishes until it is
    stopped once it has published ``count`` events."""
    published = []
    stop = asyncio.Event()

    async def publish(event):
        published.append(event)
        if len(published) == count:
            stop.set()

    await asyncio.wait_for(run_trickle(publish, seed=7, stop=stop, **trickle), 5)
    return published


async def test_run_trickle_publishes_until_stopped():
    published = await trickled(3, start_id=2001, interval_s=0.01)
    assert len(published) >= 3 and published[0].data.id == 2001
    assert all(e.data.id >= 2001 for e in published)


def test_the_newsroom_publishes_partial_posts_completed_later_edits_and_backdated_posts():
    newsroom = Newsroom(random.Random(3), start_id=5001, locales=LISTED_LOCALES, pool=ticker_pool())
    events = []
    for tick in range(400):
        events += newsroom.step(NOW + timedelta(seconds=5 * tick))
    by_id: dict[int, list] = {}
    for e in events:
        assert decode_event(encode_event(e)) == e
        by_id.setdefault(e.data.id, []).append(e)
    new_ids = [e.data.id for e in events if e.version == 1]
    assert new_ids == sorted(new_ids) == list(range(5001, 5001 + len(new_ids)))
    completed = edited = 0
    for versions in by_id.values():
        assert [e.version for e in versions] == list(range(1, len(versions) + 1))
        assert len({e.data.published_at for e in versions}) == 1  # translations and edits keep the time
        langs = [[t.lang for t in e.data.translations] for e in versions]
        for before, after in zip(langs, langs[1:]):
            assert after[: len(before)] == before  # a translation once out stays out
        if versions[0].data.status is PostStatus.partial and versions[-1].data.status is PostStatus.published:
            completed += 1
            assert len(langs[-1]) > len(langs[0])
        edited += sum(
            1
            for a, b in zip(versions, versions[1:])
            if [t.lang for t in a.data.translations] == [t.lang for t in b.data.translations]
        )
    assert completed >= 50 and edited >= 10
    still = {i for i, v in by_id.items() if v[-1].data.status is PostStatus.partial}
    assert still <= {p.full.data.id for p in newsroom.pending}  # the rest land later
    emitted = {e.data.id: e.emitted_at for e in events if e.version == 1}
    backdated = [i for i, v in by_id.items() if emitted[i] - v[0].data.published_at >= timedelta(minutes=10)]
    assert len(backdated) >= 15


async def test_run_trickle_stops_when_cancelled():
    published = []

    async def publish(event):
        published.append(event)

    task = asyncio.create_task(run_trickle(publish, start_id=1, interval_s=0.01, seed=7))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert published
