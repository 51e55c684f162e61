"""The nine read endpoints of the API app in process (``create_app`` on aiohttp's test server)
over a real PostgreSQL read model that the in-process projector filled from the published
events. Expectations are computed from the published events, never from the read model.
What needs processes (signals, listeners, several processes) is in tests/e2e."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import aiohttp
import orjson
import pytest
from multidict import CIMultiDict
from yarl import URL

from tests.support.apps import ReadModel, Served, api_served
from tests.support.events import visible_feed
from tests.support.forward import Forwarder
from tests.support.stack import BASE, auth
from tickerwire.devstack.demo import dataset
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.schemas.models import LIVE_STATUSES, VISIBLE_STATUSES, TokenEvent
from tickerwire.services.api.compression import MIN_BYTES

LEAN_KEYS = [
    "id",
    "slug",
    "published_at",
    "lang",
    "canonical_url",
    "title",
    "lede",
    "cover_image_url",
    "categories",
    "importance",
    "sentiment",
]
DETAIL_KEYS = LEAN_KEYS + ["body", "og_image_url", "gallery_urls", "tags", "hashtags", "byline", "source_url"]
TOKEN_KEYS = [
    "ticker",
    "name",
    "logo_url",
    "post_count",
    "market_cap_rank",
    "exchange_listings",
    "categories",
    "genesis_date",
    "primary_ecosystem",
]
NOW = datetime.now(timezone.utc).replace(microsecond=0)
POSTS = 400
TOKENS = 3000


class Client:
    def __init__(self, http: aiohttp.ClientSession, url: str, key: str) -> None:
        self.http, self.url, self.key = http, url, key

    async def get(self, path: str, params=None, headers=None, *, status: int = 200):
        async with self.http.get(
            self.url + BASE + path, params=params, headers={**auth(self.key), **(headers or {})}
        ) as resp:
            body = await resp.read()
            assert resp.status == status, (resp.status, body[:500])
            return resp, (orjson.loads(body) if body else None)

    async def ids(self, path: str = "/posts", **params) -> tuple[list[int], dict]:
        _, doc = await self.get(path, {k: str(v) for k, v in params.items()})
        return [p["id"] for p in doc["posts"]], doc


# --------------------------------------------------------------------------- the module's read model and app


@dataclass
class World:
    api: Served
    model: ReadModel


@pytest.fixture(scope="module")
async def world(pg_dsn):
    catalog = dataset.catalog_events(7, now=NOW, tokens=TOKENS)
    posts = dataset.post_events(7, now=NOW, posts=POSTS)
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn)
        await model.project([*catalog, *posts])
        key = await model.provision("ws_apiread", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        async with api_served(dsn) as api, aiohttp.ClientSession() as http:
            client = Client(http, api.url, key)
            _, doc = await client.get("/tokens")
            assert len(doc["tokens"]) == TOKENS  # the catalog is loaded before the app says ready
            yield World(api, model), client, catalog, posts


async def test_posts_list_is_lean_newest_first_default_20(world):
    w, client, catalog, posts = world
    ids, doc = await client.ids()
    expected = visible_feed(posts)
    assert ids == [p.id for p in expected[:20]]
    assert list(doc) == ["posts", "next_cursor", "prev_cursor"]
    assert all(list(p) == LEAN_KEYS for p in doc["posts"])
    assert doc["next_cursor"] == str(ids[-1]) and doc["prev_cursor"] is None


async def test_detail_by_id_and_slug_with_locale_rules(world):
    w, client, catalog, posts = world
    feed = visible_feed(posts)
    post = next(p for p in feed if len(p.translations) >= 3 and p.translations[0].lang == "en-US")
    other = next(t for t in post.translations if t.lang != "en-US")
    _, by_id = await client.get(f"/posts/{post.id}")
    assert list(by_id) == DETAIL_KEYS and by_id["id"] == post.id and by_id["lang"] == "en-US"
    _, by_slug = await client.get(f"/posts/{post.translations[0].slug}")
    assert by_slug == by_id
    # A slug of another locale names the same post, served in the requested (default) locale.
    _, via_other = await client.get(f"/posts/{other.slug}")
    assert via_other == by_id
    _, localized = await client.get(f"/posts/{other.slug}", {"lang": other.lang})
    assert localized["lang"] == other.lang and localized["slug"] == other.slug and localized["body"] == other.body
    # The detail's lean fields are the list item.
    at = feed.index(post)
    ids, doc = await client.ids(limit=50, **({"before": feed[at - 1].id} if at else {}))
    listed = next(p for p in doc["posts"] if p["id"] == post.id)
    assert {k: by_id[k] for k in LEAN_KEYS} == listed
    # Missing translation in the requested locale, an invisible post and an unknown one: 404.
    missing = next(p for p in feed if not any(t.lang == "de-DE" for t in p.translations))
    _, err = await client.get(f"/posts/{missing.id}", {"lang": "de-DE"}, status=404)
    assert err["error"]["code"] == "NOT_FOUND"
    hidden = next(e.data for e in posts if e.data.status not in VISIBLE_STATUSES)
    await client.get(f"/posts/{hidden.id}", status=404)
    await client.get(f"/posts/{hidden.translations[0].slug}", {"lang": hidden.translations[0].lang}, status=404)
    await client.get("/posts/no-such-post", status=404)
    await client.get("/posts/99999999", status=404)


async def test_lang_optional_and_unsupported_falls_back(world):
    w, client, catalog, posts = world
    default, _ = await client.ids(limit=10)
    assert (await client.ids(limit=10, lang="xx-XX"))[0] == default
    assert (await client.ids(limit=10, lang="pl-PL"))[0] == default  # active but not on the web channel
    de_ids, doc = await client.ids(limit=50, lang="de-DE")
    assert de_ids == [p.id for p in visible_feed(posts, "de-DE")[:50]]
    assert {p["lang"] for p in doc["posts"]} == {"de-DE"}
    for cased in ("de-de", "DE-DE", "De-dE"):  # BCP 47 tags are case-insensitive
        assert (await client.ids(limit=50, lang=cased))[0] == de_ids
    _, cats = await client.get("/categories", {"lang": "zz"})
    _, cats_default = await client.get("/categories")
    assert cats == cats_default


def _matching(posts, **pred) -> list[int]:
    return [p.id for p in visible_feed(posts) if all(f(p) for f in pred.values())]


async def test_filters_or_within_and_between(world):
    w, client, catalog, posts = world
    feed = visible_feed(posts)
    groups = {c.data.slug: c.data.group_slug for c in catalog if c.type == "category"}

    async def all_ids(**params) -> list[int]:
        out, cursor = [], None
        while True:
            ids, doc = await client.ids(limit=50, **params, **({"before": cursor} if cursor else {}))
            out += ids
            cursor = doc["next_cursor"]
            if cursor is None:
                return out

    assert await all_ids(category="markets") == _matching(
        posts, c=lambda p: any(groups.get(s) == "markets" for s in p.categories)
    )
    assert await all_ids(category="mining,lending") == _matching(
        posts, c=lambda p: {"mining", "lending"} & set(p.categories)
    )
    assert await all_ids(category="no-such-category") == []
    some_tickers = sorted({t for p in feed[:30] for t in p.tickers})[:2]
    expected = _matching(posts, t=lambda p: set(some_tickers) & set(p.tickers))
    assert expected and await all_ids(ticker=",".join(some_tickers)) == expected
    assert await all_ids(ticker=",".join(t.lower() for t in some_tickers)) == expected
    assert await all_ids(ticker="NOPE123") == []
    # An unknown value matches nothing, however long; next to a known one it changes nothing.
    assert await all_ids(ticker="X" * 101) == [] and await all_ids(category="y" * 300) == []
    assert await all_ids(ticker=",".join([*some_tickers, "Z" * 150])) == expected
    tag = next(h for p in feed for h in p.hashtags)
    assert await all_ids(hashtag=tag.upper()) == _matching(
        posts, h=lambda p: tag.lower() in {h.lower() for h in p.hashtags}
    )
    assert await all_ids(sentiment="BULLISH,BEARISH") == _matching(
        posts, s=lambda p: p.sentiment.value in {"BULLISH", "BEARISH"}
    )
    assert await all_ids(importance_min=70) == _matching(posts, i=lambda p: p.importance >= 70)
    since = feed[40].published_at
    assert await all_ids(since=since.isoformat()) == [p.id for p in feed[:41]]
    assert await all_ids(since=since.astimezone(timezone(timedelta(hours=5))).isoformat()) == [p.id for p in feed[:41]]
    basic = since.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S.%f+0000")  # ISO 8601's basic format
    assert await all_ids(since=basic) == [p.id for p in feed[:41]]
    both = await all_ids(sentiment="NEUTRAL", importance_min=40, category="technology")
    assert both == _matching(
        posts,
        s=lambda p: p.sentiment.value == "NEUTRAL",
        i=lambda p: p.importance >= 40,
        c=lambda p: any(groups.get(s) == "technology" for s in p.categories),
    )


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "-3"}, "limit"),
        ({"limit": "51"}, "limit"),
        ({"limit": "2.5"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": ""}, "limit"),
        ({"since": ""}, "since"),
        ({"limit": "9" * 400}, "limit"),
        ({"importance_min": "101"}, "importance_min"),
        ({"importance_min": "-1"}, "importance_min"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2024-05-01T12:00:00"}, "since"),
        ({"since": "2024-02-30T00:00:00Z"}, "since"),
        ({"sentiment": "BULLISH,HAPPY"}, "sentiment"),
        ({"after": "abc"}, "after"),
        ({"before": "0"}, "before"),
        ({"category": ",".join(f"c{i}" for i in range(21))}, "category"),
        ({"hashtag": ",".join(f"h{i}" for i in range(21))}, "hashtag"),
        # Over Python's 4,300-digit conversion limit (was a 500), and zeros before a valid value.
        ({"after": "1" * 5000}, "after"),
        ({"before": "-" + "7" * 5000}, "before"),
        ({"importance_min": "0" * 20000 + "101"}, "importance_min"),
    ],
)
async def test_invalid_list_parameters_get_422_naming_the_field(world, params, field):
    w, client, catalog, posts = world
    resp, doc = await client.get("/posts", params, status=422)
    assert resp.content_type == "application/json"
    assert doc["error"]["code"] == "VALIDATION_FAILED" and doc["error"]["field"] == field


async def test_unknown_sentiment_message_names_value_and_allowed_values(world):
    w, client, catalog, posts = world
    _, doc = await client.get("/posts", {"sentiment": "HAPPY"}, status=422)
    message = doc["error"]["message"]
    assert "HAPPY" in message and all(s in message for s in ("BULLISH", "NEUTRAL", "BEARISH"))


async def test_limit_bounds_are_accepted(world):
    w, client, catalog, posts = world
    assert len((await client.ids(limit=1))[0]) == 1
    assert len((await client.ids(limit=50))[0]) == 50
    assert len((await client.ids(limit="0" * 5000 + "50"))[0]) == 50  # leading zeros are still the number


async def test_cursor_walks_both_ways_and_gap_fill(world):
    w, client, catalog, posts = world
    expected = [p.id for p in visible_feed(posts)]
    down, cursor = [], None
    while True:
        ids, doc = await client.ids(limit=37, **({"before": cursor} if cursor else {}))
        down += ids
        if cursor:
            assert doc["prev_cursor"] == str(ids[0])
        cursor = doc["next_cursor"]
        if cursor is None:
            break
    assert down == expected
    # Upwards from the oldest post with after=prev_cursor, exactly like a stream gap-fill.
    up, cursor = [], str(expected[-1])
    while True:
        ids, doc = await client.ids(limit=23, after=cursor)
        if not ids:
            break
        assert ids == sorted(ids, key=expected.index)  # every page newest first
        up = ids + up
        cursor = str(ids[0])  # gap-fill: after=<newest id seen>
    assert up == expected[:-1]
    # after=X returns the posts right after X, newest first; prev_cursor null at the top.
    ids, doc = await client.ids(limit=5, after=expected[100])
    assert (
        ids == expected[95:100] and doc["prev_cursor"] == str(expected[95]) and doc["next_cursor"] == str(expected[99])
    )
    ids, doc = await client.ids(limit=5, after=expected[3])
    assert ids == expected[:3] and doc["prev_cursor"] is None
    # Both cursors: the posts strictly between them, nearest to `before` first.
    ids, _ = await client.ids(limit=50, before=expected[10], after=expected[20])
    assert ids == expected[11:20]
    ids, _ = await client.ids(limit=4, before=expected[10], after=expected[20])
    assert ids == expected[11:15]


async def test_cursor_of_another_locale_or_invisible_post_positions_by_time(world):
    w, client, catalog, posts = world
    de_feed = [p.id for p in visible_feed(posts, "de-DE")]
    en_only = next(p for p in visible_feed(posts) if p.id not in de_feed and p.id < de_feed[5])
    ids, _ = await client.ids(lang="de-DE", limit=3, before=en_only.id)
    assert ids == [i for i in de_feed if i < en_only.id][:3]
    hidden = next(e.data for e in posts if e.data.status.value == "retracted" and e.data.published_at)
    ids, _ = await client.ids(limit=2, before=hidden.id)
    assert ids == [p.id for p in visible_feed(posts) if (p.published_at, p.id) < (hidden.published_at, hidden.id)][:2]


async def test_unknown_or_malformed_cursor(world):
    w, client, catalog, posts = world
    _, doc = await client.get("/posts", {"after": "99999999"}, status=404)
    assert doc["error"] == {"code": "NOT_FOUND", "message": doc["error"]["message"], "field": "after"}
    never_published = next(e.data for e in posts if e.data.published_at is None)
    _, doc = await client.get("/posts", {"before": str(never_published.id)}, status=404)
    assert doc["error"]["field"] == "before"
    _, doc = await client.get("/posts", {"before": "12x"}, status=422)
    assert doc["error"]["field"] == "before"


async def test_search_ranked_paged_filtered(world):
    w, client, catalog, posts = world
    for q, field in [(None, "q"), ("ab", "q"), ("  ab \n", "q"), ("x" * 501, "q")]:
        _, doc = await client.get("/search", {} if q is None else {"q": q}, status=422)
        assert doc["error"]["field"] == field
    feed = visible_feed(posts)
    word = max(feed[0].translations[0].title.split(), key=len).strip(".,:;!?'\"")
    ids, doc = await client.ids("/search", q=word, limit=50)
    assert ids and feed[0].id in ids or doc["next_cursor"]
    # Walking every page gives each match once; the same walk backwards gives the same order.
    walked, cursor = [], None
    while True:
        page, doc = await client.ids("/search", q=word, limit=7, **({"before": cursor} if cursor else {}))
        walked += page
        cursor = doc["next_cursor"]
        if cursor is None:
            break
    assert len(walked) == len(set(walked))
    back, cursor = [], walked[-1]
    while True:
        page, doc = await client.ids("/search", q=word, limit=7, after=cursor)
        if not page:
            break
        back = page + back
        cursor = page[0]
    assert back == walked[:-1]
    # Exclusion and filters.
    excluded, _ = await client.ids("/search", q=f"{word} -{word}", limit=50)
    assert excluded == []
    bullish, _ = await client.ids("/search", q=word, limit=50, sentiment="BULLISH")
    by_id = {p.id: p for p in feed}
    assert set(bullish) == {i for i in walked if by_id[i].sentiment.value == "BULLISH"}


async def test_search_is_per_locale_with_its_stemmer(world):
    w, client, catalog, posts = world
    de = visible_feed(posts, "de-DE")
    title = next(t for t in de[0].translations if t.lang == "de-DE").title
    word = max(title.split(), key=len).strip(".,:;!?'\"„“")
    ids, doc = await client.ids("/search", q=word, lang="de-DE", limit=50)
    assert de[0].id in ids or doc["next_cursor"]
    assert {p["lang"] for p in doc["posts"]} == {"de-DE"}
    phrase = " ".join(title.split()[:2])
    ids, _ = await client.ids("/search", q=f'"{phrase}"', lang="de-DE", limit=50)
    assert de[0].id in ids


async def test_tokens_all_rows_in_documented_order(world):
    w, client, catalog, posts = world
    resp, doc = await client.get("/tokens")
    tokens = doc["tokens"]
    assert len(tokens) == TOKENS and all(list(t) == TOKEN_KEYS for t in tokens)
    published = {e.data.ticker: e.data for e in catalog if isinstance(e, TokenEvent)}
    ranked = sorted(
        (t for t in published.values() if t.market_cap_rank is not None), key=lambda t: (t.market_cap_rank, t.ticker)
    )
    unranked = sorted((t for t in published.values() if t.market_cap_rank is None), key=lambda t: t.ticker)
    assert [t["ticker"] for t in tokens] == [t.ticker for t in ranked + unranked]
    counts: dict[str, int] = {}
    for e in posts:
        if e.data.status in LIVE_STATUSES:
            for t in e.data.tickers:
                counts[t] = counts.get(t, 0) + 1
    assert {t["ticker"]: t["post_count"] for t in tokens} == {t: counts.get(t, 0) for t in published}
    assert any(t["post_count"] == 0 for t in tokens)
    assert resp.headers["ETag"].startswith('"')


async def test_token_single_shape_case_insensitive(world):
    w, client, catalog, posts = world
    _, listed = await client.get("/tokens")
    first = listed["tokens"][0]
    _, one = await client.get(f"/tokens/{first['ticker'].lower()}")
    assert list(one) == TOKEN_KEYS + ["homepage_url", "description"]
    assert {k: one[k] for k in TOKEN_KEYS} == first
    _, again = await client.get(f"/tokens/{first['ticker']}")
    assert again == one
    _, err = await client.get("/tokens/NOPE-NOT-A-TOKEN", status=404)
    assert err["error"]["code"] == "NOT_FOUND"


async def test_categories_tree_group_and_leaf(world):
    w, client, catalog, posts = world
    _, tree = await client.get("/categories", {"lang": "fr-FR"})
    assert len(tree["groups"]) == 7 and all(len(g["leaves"]) == 5 for g in tree["groups"])
    assert tree["groups"][0] == {"slug": "markets", "name": "Marchés", "leaves": tree["groups"][0]["leaves"]}
    assert tree["groups"][0]["leaves"][0] == {"slug": "spot-trading", "name": "Marché au comptant"}
    _, group = await client.get("/categories/markets", {"lang": "de-DE"})
    assert group == {"slug": "markets", "name": "Märkte", "is_group": True, "group": None, "leaves": group["leaves"]}
    assert [l["slug"] for l in group["leaves"]] == [
        "spot-trading",
        "derivatives",
        "price-analysis",
        "fund-flows",
        "macroeconomics",
    ]
    _, leaf = await client.get("/categories/derivatives")
    assert leaf == {
        "slug": "derivatives",
        "name": "Derivatives",
        "is_group": False,
        "group": {"slug": "markets", "name": "Markets"},
        "leaves": None,
    }
    await client.get("/categories/nope", status=404)


async def test_languages_cacheable_for_30s(world):
    w, client, catalog, posts = world
    resp, doc = await client.get("/languages")
    assert resp.headers["Cache-Control"] == "private, max-age=30"  # the partner may cache it; a shared cache may not
    assert [l["code"] for l in doc["languages"]] == list(dataset.LISTED_LOCALES)
    assert sum(l["is_default"] for l in doc["languages"]) == 1


async def test_sentiment_pulse_counts_last_24h(world):
    w, client, catalog, posts = world
    _, doc = await client.get("/sentiment-pulse")
    as_of = datetime.fromisoformat(doc["as_of"].replace("Z", "+00:00"))
    counts = {"BULLISH": 0, "NEUTRAL": 0, "BEARISH": 0}
    seen = set()
    for e in posts:
        p = e.data
        if p.id in seen or p.status not in VISIBLE_STATUSES or p.published_at is None:
            continue
        seen.add(p.id)
        bucket = p.published_at.replace(second=0, microsecond=0)
        if as_of - timedelta(hours=24) < bucket <= as_of:
            counts[p.sentiment.value] += 1
    assert doc["window"] == "24h" and doc["total_posts"] == sum(counts.values()) > 0
    assert {k: v["count"] for k, v in doc["breakdown"].items()} == counts
    assert math.isclose(sum(v["percent"] for v in doc["breakdown"].values()), 1.0, abs_tol=1e-12)
    assert all(0 <= v["percent"] <= 1 for v in doc["breakdown"].values())


async def test_conditional_requests(world):
    w, client, catalog, posts = world
    for path in [
        "/posts",
        "/posts/1",
        "/categories",
        "/categories/markets",
        "/tokens",
        "/tokens/BTC",
        "/languages",
        "/search?q=bitcoin",
    ]:
        resp, _ = await client.get(path, status=200) if path != "/posts/1" else (await _first_detail(client), None)
        etag = resp.headers["ETag"]
        assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
        target = path if path != "/posts/1" else resp.url.path.removeprefix(BASE)
        for header in [etag, f"W/{etag}", f'"nope", {etag}', "*"]:
            r304, body = await client.get(target, headers={"If-None-Match": header}, status=304)
            assert body is None and r304.headers["ETag"] == etag
        await client.get(target, headers={"If-None-Match": '"something-else"'}, status=200)


async def _first_detail(client: Client):
    _, doc = await client.get("/posts", {"limit": "1"})
    resp, _ = await client.get(f"/posts/{doc['posts'][0]['id']}")
    return resp


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    headers: CIMultiDict[str]
    body: bytes

    @property
    def error(self) -> dict:
        return orjson.loads(self.body)["error"]


async def call(
    client: Client, method: str, path: str, headers: CIMultiDict[str] | dict[str, str] | None = None
) -> Answer:
    """``method path`` as sent (``path`` is not re-quoted beyond what aiohttp does), with the key
    unless ``headers`` carries its own Authorization."""
    sent = CIMultiDict(auth(client.key)) if headers is None or "Authorization" not in headers else CIMultiDict()
    sent.extend(headers or {})
    async with client.http.request(method, client.url + path, headers=sent) as resp:
        return Answer(resp.status, resp.content_type, CIMultiDict(resp.headers), await resp.read())


#: Requests the API refuses: each answer is the JSON error envelope with its status and code.
REFUSED = [
    pytest.param("GET", f"{BASE}/nope", 404, "NOT_FOUND", id="an-unknown-path"),
    pytest.param("GET", "/", 404, "NOT_FOUND", id="a-path-outside-the-api"),
    pytest.param("DELETE", f"{BASE}/posts", 405, "METHOD_NOT_ALLOWED", id="delete-a-list"),
    pytest.param("POST", f"{BASE}/tokens", 405, "METHOD_NOT_ALLOWED", id="post-to-a-list"),
    # Before: a 413 about a chunked body it does not have.
    pytest.param("CONNECT", f"{BASE}/posts", 405, "METHOD_NOT_ALLOWED", id="connect"),
    pytest.param("GET", f"{BASE}/posts?limit=%zz", 422, "VALIDATION_FAILED", id="a-malformed-percent-escape"),
    pytest.param("GET", f"{BASE}/search?q=" + "a" * 20000, 422, "VALIDATION_FAILED", id="an-over-long-search"),
    pytest.param("GET", f"{BASE}/posts?since=%00", 422, "VALIDATION_FAILED", id="a-nul-since"),
    # Before: named as ''.
    pytest.param("GET", f"{BASE}/posts?sentiment=" + "Y" * 101, 422, "VALIDATION_FAILED", id="an-over-long-enum-value"),
    pytest.param("GET", f"{BASE}/posts/%00bad", 404, "NOT_FOUND", id="a-nul-in-a-post-id"),
    pytest.param("GET", f"{BASE}/tokens/%00", 404, "NOT_FOUND", id="a-nul-ticker"),
    # A ticker aliased by Unicode case mapping: dotless i (INJ), the fi ligature (FIL). Before: 200.
    pytest.param("GET", f"{BASE}/tokens/%C4%B1nj", 404, "NOT_FOUND", id="a-dotless-i-ticker"),
    pytest.param("GET", f"{BASE}/tokens/%EF%AC%81l", 404, "NOT_FOUND", id="a-ligature-ticker"),
]
# An unknown Expect is answered before the application: tests/e2e/test_low_level_errors.py.


@pytest.mark.parametrize(("method", "path", "status", "code"), REFUSED)
async def test_a_refused_request_is_answered_with_the_error_envelope(world, method, path, status, code):
    w, client, catalog, posts = world
    answer = await call(client, method, path)
    assert (answer.status, answer.content_type) == (status, "application/json"), answer.body[:300]
    error = answer.error
    assert set(error) <= {"code", "message", "field", "retry_after_sec"} and error["message"]
    assert error["code"] == code


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(f"{BASE}/posts?%%%&&==", id="a-query-of-junk"),
        pytest.param(f"{BASE}/posts?category=%00", id="a-nul-category"),
        pytest.param(f"{BASE}/search?q=%00%00%00", id="a-search-for-nuls"),
    ],
)
async def test_junk_that_names_nothing_is_an_answer_not_an_error(world, path):
    w, client, catalog, posts = world
    answer = await call(client, "GET", path)
    assert (answer.status, answer.content_type) == (200, "application/json"), answer.body[:300]
    assert "posts" in orjson.loads(answer.body)


async def test_connect_is_refused_naming_the_methods_allowed(world):
    w, client, catalog, posts = world
    answer = await call(client, "CONNECT", f"{BASE}/posts")
    assert answer.status == 405 and answer.headers["Allow"] == "GET, HEAD"


async def test_an_over_long_enum_value_is_named_in_the_error(world):
    w, client, catalog, posts = world
    message = (await call(client, "GET", f"{BASE}/posts?sentiment=" + "Y" * 101)).error["message"]
    assert "'YYYY" in message and "101 characters" in message


@pytest.mark.parametrize(
    "valid_first", [pytest.param(True, id="the-valid-key-first"), pytest.param(False, id="the-valid-key-second")]
)
async def test_two_authorization_headers_are_refused(world, valid_first):
    """Before: the first one counted."""
    w, client, catalog, posts = world
    keys = [client.key, "tw_live_" + "x" * 43]
    twice = CIMultiDict(("Authorization", f"Bearer {key}") for key in (keys if valid_first else keys[::-1]))
    answer = await call(client, "GET", f"{BASE}/languages", twice)
    assert answer.status == 401 and answer.error["code"] == "NOT_AUTHENTICATED"


async def test_a_ticker_filter_aliased_by_unicode_case_mapping_matches_nothing(world):
    w, client, catalog, posts = world
    _, doc = await client.get("/posts", {"ticker": "ınj,ﬁl"})
    assert doc["posts"] == []


async def test_database_down_gives_503_envelope(world):
    w, client, catalog, posts = world
    dsn = URL(w.model.dsn)
    async with Forwarder(f"{dsn.host}:{dsn.port}") as proxy:  # a database the test can take away
        await proxy.open()
        async with api_served(str(dsn.with_host("127.0.0.1").with_port(proxy.port))) as api:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{api.url}{BASE}/posts", headers=auth(client.key)) as resp:
                    assert resp.status == 200
                await proxy.close()  # every connection closed, new ones refused
                for path in ["/posts", "/tokens", "/posts/1", "/sentiment-pulse"]:
                    async with http.get(f"{api.url}{BASE}{path}", headers=auth(client.key)) as resp:
                        body = await resp.read()
                        assert resp.status == 503, (path, body[:300])
                        assert resp.content_type == "application/json"
                        assert resp.headers["Retry-After"] == "1"
                        err = orjson.loads(body)["error"]
                        assert err["code"] == "SERVICE_UNAVAILABLE" and err["retry_after_sec"] == 1


async def test_an_admission_the_database_cannot_answer_is_a_503_within_the_statement_bound(world):
    """The counters' table locked by another session (as a frozen database would hold it): a
    request waits for its admission no longer than any statement may run, then gets the 503."""
    w, client, catalog, posts = world
    async with api_served(w.model.dsn, db_statement_timeout_s=0.5) as api, aiohttp.ClientSession() as http:
        async with http.get(f"{api.url}{BASE}/tokens", headers=auth(client.key)) as resp:
            assert resp.status == 200
        blocker = await w.model.conn()
        try:
            async with blocker.transaction():
                await blocker.execute("LOCK TABLE public.usage_minute IN ACCESS EXCLUSIVE MODE")
                started = asyncio.get_running_loop().time()
                async with http.get(f"{api.url}{BASE}/tokens", headers=auth(client.key)) as resp:
                    waited = asyncio.get_running_loop().time() - started
                    body = await resp.read()
        finally:
            await blocker.close()
        assert resp.status == 503, body[:300]
        assert orjson.loads(body)["error"]["code"] == "SERVICE_UNAVAILABLE" and resp.headers["Retry-After"] == "1"
        assert 0.4 <= waited < 1.5  # the 0.5 s bound and the watchdog's tick, not a fixed 5 s


# --------------------------------------------------------------------------- pages from memory, gzip


async def _page_cache(w: World) -> dict[str, float]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{w.api.admin_url}/metrics") as resp:
            text = await resp.text()
    out = {}
    for line in text.splitlines():
        if line.startswith("tickerwire_api_page_cache_total{"):
            name, value = line.rsplit(" ", 1)
            out[name.split('result="')[1].split('"')[0]] = float(value)
    return out


async def _bump_posts_stamp(w: World) -> None:
    conn = await w.model.conn()
    try:
        await conn.execute("UPDATE change_stamps SET stamp = stamp + 1 WHERE name = 'posts'")
    finally:
        await conn.close()


async def _raw(client: Client, path: str, params: dict, headers: dict | None = None) -> tuple[int, dict, bytes]:
    async with client.http.get(
        client.url + BASE + path, params=params, headers={**auth(client.key), **(headers or {})}
    ) as resp:
        return resp.status, resp.headers.copy(), await resp.read()


def _a_title_word(posts) -> str:
    return max(visible_feed(posts)[0].translations[0].title.split(), key=len).strip(".,:;!?'\"")


async def test_searches_from_memory_are_kept_apart_by_their_terms(world):
    w, client, catalog, posts = world
    word = _a_title_word(posts)
    for _ in range(2):  # the second round is answered from memory
        found, _ = await client.ids("/search", q=word, limit=50)
        excluded, _ = await client.ids("/search", q=f"{word} -{word}", limit=50)
        assert found and excluded == []
    assert (await _page_cache(w)).get("hit", 0) >= 2


async def test_a_page_from_memory_is_byte_identical_to_a_fresh_one(world):
    w, client, catalog, posts = world
    for path, params in [
        ("/posts", {"lang": "de-DE", "limit": "9", "sentiment": "BULLISH,NEUTRAL"}),
        ("/posts", {"limit": "5", "before": str(visible_feed(posts)[7].id)}),
        (f"/posts/{visible_feed(posts)[3].id}", {"lang": "en-US"}),
        ("/search", {"q": _a_title_word(posts), "limit": "4"}),
    ]:
        before = await _page_cache(w)
        status, headers, body = await _raw(client, path, params)
        assert status == 200
        fresh = (body, headers["ETag"], headers["X-Log-Position"])
        status, headers, body = await _raw(client, path, params)
        after = await _page_cache(w)
        assert after.get("hit", 0) == before.get("hit", 0) + 1, (path, before, after)  # the second one came from memory
        assert (status, body, headers["ETag"], headers["X-Log-Position"]) == (200, *fresh)
        # A posts change drops the cache: the next answer is built again, and equals the cached one.
        await _bump_posts_stamp(w)
        for _ in range(20):
            status, headers, body = await _raw(client, path, params)
            if (await _page_cache(w)).get("miss", 0) > after.get("miss", 0):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the page cache was not dropped within 1 s of the posts stamp")
        assert (status, body, headers["ETag"]) == (200, *fresh[:2])
        status, _, _ = await _raw(client, path, params, {"If-None-Match": fresh[1]})
        assert status == 304


async def test_large_bodies_are_gzipped_when_accepted_and_revalidate_by_their_own_tag(world):
    w, client, catalog, posts = world
    import gzip

    url = client.url + BASE + "/tokens"
    async with aiohttp.ClientSession(auto_decompress=False) as raw:
        async with raw.get(url, headers={**auth(client.key), "Accept-Encoding": "identity"}) as resp:
            plain, plain_tag = await resp.read(), resp.headers["ETag"]
            assert "Content-Encoding" not in resp.headers and resp.headers["Vary"] == "Accept-Encoding"
        for accept in ("gzip", "br;q=1.0, gzip;q=0.8", "*"):
            async with raw.get(url, headers={**auth(client.key), "Accept-Encoding": accept}) as resp:
                packed = await resp.read()
                assert resp.headers["Content-Encoding"] == "gzip" and resp.headers["Vary"] == "Accept-Encoding"
                assert gzip.decompress(packed) == plain and len(packed) < len(plain) / 3
                gz_tag = resp.headers["ETag"]
                assert gz_tag != plain_tag and gz_tag.startswith('"') and gz_tag.endswith('"')
        async with raw.get(url, headers={**auth(client.key), "Accept-Encoding": "gzip;q=0"}) as resp:
            assert "Content-Encoding" not in resp.headers and await resp.read() == plain
        async with raw.get(
            url, headers={**auth(client.key), "Accept-Encoding": "gzip", "If-None-Match": gz_tag}
        ) as resp:
            assert resp.status == 304 and resp.headers["ETag"] == gz_tag and resp.headers["Vary"] == "Accept-Encoding"
        small = client.url + BASE + "/categories/markets"
        async with raw.get(small, headers={**auth(client.key), "Accept-Encoding": "identity"}) as resp:
            assert len(await resp.read()) < MIN_BYTES
        async with raw.get(small, headers={**auth(client.key), "Accept-Encoding": "gzip"}) as resp:
            assert "Content-Encoding" not in resp.headers  # small bodies go as they are


async def test_two_posts_of_one_millisecond_are_ordered_by_id_and_each_is_after_the_other(pg_dsn):
    """Partners see published_at to the millisecond, and the order (and the after= cursor)
    follows what they see: ties by id. With the microseconds kept, 2 (published 100 µs into
    the millisecond) sorted before 1 (900 µs), so a client resuming after 1 never got 2."""
    from tests.support.events import locale_ev, post_ev

    at = NOW + timedelta(minutes=5)
    events = [
        locale_ev("en-US", default=True),
        post_ev(1, at=at + timedelta(microseconds=900)),
        post_ev(2, at=at + timedelta(microseconds=100)),
        post_ev(3, at=at + timedelta(milliseconds=1)),
    ]
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn)
        await model.project(events)
        key = await model.provision("ws_apiread_tie", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        async with api_served(dsn) as api, aiohttp.ClientSession() as http:
            client = Client(http, api.url, key)
            newest_first, doc = await client.ids(limit=10)
            assert newest_first == [3, 2, 1]
            assert doc["posts"][1]["published_at"] == doc["posts"][2]["published_at"]
            assert (await client.ids(after=1))[0] == [3, 2]  # right after 1, newest first
            assert (await client.ids(before=2))[0] == [1]
