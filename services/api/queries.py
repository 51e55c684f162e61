"""Every statement the read API runs. Plain SQL; the read-model schema is first on the search_path.

The post list and search are one statement each per request, composed by :func:`page_query`
from fixed fragments (only values travel as parameters), so each request is a single round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

from .params import Filters, Page

# The consistency mark (X-Log-Position): the projector's stored position (next offset to
# project) of every partition of the posts topic, "partition:offset" ascending, comma-separated;
# '' while nothing is stored. Read inside the statement whose snapshot the response reflects.
_LOG_POSITION = (
    "(SELECT COALESCE(string_agg(p.partition || ':' || p.next_offset, ',' ORDER BY p.partition), '') "
    "FROM positions p WHERE p.topic = {topic}::text)"
)


def log_position(topic_ref: str) -> str:
    """The mark as an SQL expression; ``topic_ref`` is the parameter holding the posts topic."""
    return _LOG_POSITION.format(topic=topic_ref)


# The change stamps and, in the same snapshot, the mark the cached bodies are current for.
SELECT_STAMPS = f"SELECT name, stamp, {log_position('$1')} AS log_position FROM change_stamps"

SELECT_LANGUAGES = """
SELECT code, name, native_name, country_code, direction, is_default
FROM locales
WHERE active AND web_channel
ORDER BY position, code
"""

SELECT_CATEGORIES = "SELECT slug, is_group, group_slug, position, names FROM categories ORDER BY position, slug"

# Spec 2.4: every token, zero-post ones included; ranked tokens first by rank, then unranked by ticker.
SELECT_TOKENS = """
SELECT t.ticker, t.name, t.logo_url, COALESCE(c.post_count, 0) AS post_count, t.market_cap_rank,
       t.exchange_listings, t.categories, to_char(t.genesis_date, 'YYYY-MM-DD') AS genesis_date,
       t.primary_ecosystem::text AS primary_ecosystem, t.homepage_url, t.description
FROM tokens t LEFT JOIN ticker_post_counts c ON c.ticker = t.ticker
ORDER BY t.market_cap_rank ASC NULLS LAST, t.ticker ASC
"""

# Minute buckets of visible posts by published_at; the window is (as_of - 24h, as_of].
# The last row (sentiment NULL) carries the mark.
SELECT_PULSE = f"""
SELECT sentiment, COALESCE(sum(count), 0)::bigint AS n, NULL AS log_position
FROM sentiment_buckets
WHERE bucket > $1::timestamptz - interval '24 hours' AND bucket <= $1::timestamptz
GROUP BY sentiment
UNION ALL SELECT NULL, NULL, {log_position('$2')}
"""

# By id (when the segment is a number) or by slug in any locale (the requested locale's own
# slug first); the post is then served in the requested locale, or not at all.
SELECT_DETAIL = f"""
SELECT (SELECT t.detail FROM post_translations t
WHERE t.lang = $1 AND t.visible AND t.post_id = (
    SELECT s.post_id FROM post_translations s
    WHERE s.post_id = $2::bigint OR s.slug = $3
    ORDER BY (s.post_id = $2::bigint) IS TRUE DESC, (s.lang = $1) DESC, s.visible DESC, s.post_id DESC
    LIMIT 1)) AS detail, {log_position('$4')} AS log_position
"""

# Row kinds of a page statement's result.
ITEM, OLDER, NEWER, MISSING_AFTER, MISSING_BEFORE, LOG_POSITION = range(6)

# The cursor's position: for the feed, its (published_at, id) in any locale.
_FEED_CURSOR = "SELECT published_at, id FROM posts WHERE id = {id} AND published_at IS NOT NULL"
# For search, its (rank for this query, published_at, id) in the searched locale.
_SEARCH_CURSOR = (
    "SELECT ts_rank_cd(c.tsv, {tsq}), c.published_at, c.post_id FROM post_translations c "
    "WHERE c.post_id = {id} AND c.lang = $1 AND c.published_at IS NOT NULL"
)


#: Search ranks the newest this-many matching translations of the locale, so its cost is
#: bounded however common the words are (the ranking reads each candidate's tsvector).
SEARCH_CANDIDATES = 1000


@dataclass(frozen=True, slots=True)
class Search:
    config: str
    text: str


def page_query(
    lang: str, filters: Filters, page: Page, search: Search | None = None, log_topic: str | None = None
) -> tuple[str, list]:
    """One statement answering a page of /posts or /search, with its parameters.

    Rows: the page items (kind ITEM, newest or best first, with ``post_id`` and ``lean``),
    then one row per flag that holds: OLDER (items exist past the last one), NEWER (items
    exist before the first one), MISSING_AFTER / MISSING_BEFORE (that cursor names no post),
    and with ``log_topic`` the LOG_POSITION row (its ``lean`` is the mark of this snapshot).
    """
    args: list = [lang]

    def arg(value) -> str:
        args.append(value)
        return f"${len(args)}"

    where = ["t.lang = $1", "t.visible"]
    if filters.category is not None:
        where.append(f"t.category_slugs && {arg(list(filters.category))}::text[]")
    if filters.ticker is not None:
        where.append(f"t.tickers && {arg(list(filters.ticker))}::text[]")
    if filters.hashtag is not None:
        where.append(f"t.hashtags && {arg(list(filters.hashtag))}::text[]")
    if filters.sentiment is not None:
        where.append(f"t.sentiment = ANY({arg(list(filters.sentiment))}::text[])")
    if filters.importance_min is not None:
        where.append(f"t.importance >= {arg(filters.importance_min)}::integer")
    if filters.since is not None:
        where.append(f"t.published_at >= {arg(filters.since)}::timestamptz")
    if search is not None:
        tsq = f"websearch_to_tsquery({arg(search.config)}::regconfig, {arg(search.text)})"
        where.append(f"t.tsv @@ {tsq}")
        parts = [f"ts_rank_cd(t.tsv, {tsq})", "t.published_at", "t.post_id"]
        cursor_sql = lambda ref: _SEARCH_CURSOR.format(tsq=tsq, id=ref)  # noqa: E731
    else:
        parts = ["t.published_at", "t.post_id"]
        cursor_sql = lambda ref: _FEED_CURSOR.format(id=ref)  # noqa: E731
    names = [f"k{i}" for i in range(len(parts))]
    key = ", ".join(parts)
    cols = ", ".join(names)
    select_key = ", ".join(f"{p} AS {n}" for p, n in zip(parts, names))
    desc = ", ".join(f"{n} DESC" for n in names)
    asc = ", ".join(f"{n} ASC" for n in names)
    # `after` alone walks towards newer items: take the nearest ones (then show them newest first).
    direction = "ASC" if page.after is not None and page.before is None else "DESC"
    order = ", ".join(f"{p} {direction}" for p in parts)

    ctes: list[str] = []
    bounds: list[str] = []
    flags: list[str] = []
    if page.after is not None:
        ctes.append(f"a AS ({cursor_sql(arg(page.after) + '::bigint')})")
        bounds.append(f"({key}) > (SELECT * FROM a)")
        flags.append(f"SELECT {MISSING_AFTER}, NULL::bigint, NULL::text, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM a)")
    if page.before is not None:
        ctes.append(f"b AS ({cursor_sql(arg(page.before) + '::bigint')})")
        bounds.append(f"({key}) < (SELECT * FROM b)")
        flags.append(f"SELECT {MISSING_BEFORE}, NULL::bigint, NULL::text, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM b)")
    base = " AND ".join(where)
    source = "post_translations t"
    if search is not None:
        # The matches to rank: the newest SEARCH_CANDIDATES, fetched once for the page and both flags.
        ctes.insert(
            0,
            f"cand AS MATERIALIZED (SELECT t.post_id, t.lean, t.tsv, t.published_at FROM post_translations t "
            f"WHERE {base} ORDER BY t.published_at DESC, t.post_id DESC LIMIT {SEARCH_CANDIDATES})",
        )
        source, base = "cand t", "TRUE"
    ctes.append(
        f"page AS (SELECT t.post_id, t.lean, {select_key} FROM {source} "
        f"WHERE {' AND '.join([base, *bounds])} ORDER BY {order} LIMIT {arg(page.limit)}::integer)"
    )
    flags.append(
        f"SELECT {OLDER}, NULL::bigint, NULL::text, 0::bigint WHERE EXISTS (SELECT 1 FROM {source} "
        f"WHERE {base} AND ({key}) < (SELECT {cols} FROM page ORDER BY {asc} LIMIT 1))"
    )
    if page.after is not None or page.before is not None:
        flags.append(
            f"SELECT {NEWER}, NULL::bigint, NULL::text, 0::bigint WHERE EXISTS (SELECT 1 FROM {source} "
            f"WHERE {base} AND ({key}) > (SELECT {cols} FROM page ORDER BY {desc} LIMIT 1))"
        )
    if log_topic is not None:
        flags.append(f"SELECT {LOG_POSITION}, NULL::bigint, {log_position(arg(log_topic))}, 0::bigint")
    items = f"SELECT {ITEM} AS kind, post_id, lean, row_number() OVER (ORDER BY {desc}) AS pos FROM page"
    sql = (
        f"WITH {', '.join(ctes)}\n"
        f"SELECT kind, post_id, lean FROM ({' UNION ALL '.join([items, *flags])}) r ORDER BY kind, pos"
    )
    return sql, args

