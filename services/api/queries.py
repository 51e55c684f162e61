"""Every statement the read API runs. Plain SQL; the read-model schema is first on the search_path.

The post list and search are one statement each per request, composed by :func:`page_query`
from fixed fragments (only values travel as parameters), so each request is a single round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..common.db import replicas as replica_lsn
from ..readmodel import logposition
from .params import Filters, PageWindow

# The change stamps and, in the same snapshot, the consistency mark (X-Log-Position) the
# cached bodies are current for, and the primary's WAL position, at or past the commit of every
# stamp read: a replica that has replayed it holds what the stamps say (or later).
SELECT_STAMPS = f"SELECT name, stamp, {logposition.stored_sql('$1')} AS log_position, {replica_lsn.INSERT_LSN_SQL} AS lsn FROM change_stamps"

# docs/api.md#tokens-categories-languages-pulse: every token, zero-post ones included; ranked tokens first by rank, then unranked by ticker.
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
UNION ALL SELECT NULL, NULL, {logposition.stored_sql("$2")}
"""

# By id (when the segment is a number) or by slug in any locale (the requested locale's own
# slug first); the post is then served in the requested locale, or not at all.
SELECT_DETAIL = f"""
SELECT (SELECT t.detail FROM post_translations t
WHERE t.lang = $1 AND t.visible AND t.post_id = (
    SELECT s.post_id FROM post_translations s
    WHERE s.post_id = $2::bigint OR s.slug = $3
    ORDER BY (s.post_id = $2::bigint) IS TRUE DESC, (s.lang = $1) DESC, s.visible DESC, s.post_id DESC
    LIMIT 1)) AS detail, {logposition.stored_sql("$4")} AS log_position
"""

# Row kinds of a page statement's result.
ITEM, OLDER, NEWER, MISSING_AFTER, MISSING_BEFORE, LOG_POSITION = range(6)

# The cursor's position: for the feed, its (published_at, id) in any locale.
_FEED_CURSOR = "SELECT published_at, id FROM posts WHERE id = {id} AND published_at IS NOT NULL"

# Search ranks in tiers by where the whole query matches: 0 the title, 1 the lede, 2 the
# whole text (title, lede and body together); newest first within a tier (published_at, then
# id, descending). Each tier is read in the feed index's order (or from its own GIN index when
# its matches are few), so a page costs the same however many posts match.
TIERS = ("t.tsv_title", "t.tsv_lede", "t.tsv")
# The cursor's position for search: (tier for this q in the searched locale, published_at, id).
# A cursor post the query does not match is positioned in the last tier.
_SEARCH_CURSOR = (
    "SELECT CASE WHEN NOT c.tsv @@ {tsq} THEN 2 WHEN c.tsv_title @@ {tsq} THEN 0 WHEN c.tsv_lede @@ {tsq} THEN 1 "
    "ELSE 2 END AS tier, "
    "c.published_at AS at, c.post_id AS id FROM post_translations c "
    "WHERE c.post_id = {id} AND c.lang = {lang} AND c.published_at IS NOT NULL"
)


@dataclass(frozen=True, slots=True)
class Search:
    config: str
    text: str


def sql_literal(text: str) -> str:
    """``text`` as an SQL string literal (standard_conforming_strings, PostgreSQL's default)."""
    return "'" + text.replace("'", "''") + "'"


def _binder(args: list):
    """A function that appends a parameter value and returns its placeholder."""

    def arg(value) -> str:
        args.append(value)
        return f"${len(args)}"

    return arg


def _filters(lang_ref: str, filters: Filters, arg) -> list[str]:
    where = [f"t.lang = {lang_ref}", "t.visible"]
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
    return where


def page_query(
    lang: str, filters: Filters, page: PageWindow, search: Search | None = None, log_topic: str | None = None
) -> tuple[str, list]:
    """One statement answering a page of /posts or /search, with its parameters.

    Rows: the page items (kind ITEM, newest or best first, with ``post_id`` and ``lean``),
    then one row per flag that holds: OLDER (items exist past the last one), NEWER (items
    exist before the first one), MISSING_AFTER / MISSING_BEFORE (that cursor names no post),
    and with ``log_topic`` the LOG_POSITION row (its ``lean`` is the mark of this snapshot, as :func:`..readmodel.logposition.stored_sql` writes it).
    """
    if search is not None:
        return _search_query(lang, filters, page, search, log_topic)
    args: list = [lang]
    arg = _binder(args)
    where = _filters("$1", filters, arg)
    parts = ["t.published_at", "t.post_id"]
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
        ctes.append(f"a AS ({_FEED_CURSOR.format(id=arg(page.after) + '::bigint')})")
        bounds.append(f"({key}) > (SELECT * FROM a)")
    if page.before is not None:
        ctes.append(f"b AS ({_FEED_CURSOR.format(id=arg(page.before) + '::bigint')})")
        bounds.append(f"({key}) < (SELECT * FROM b)")
    flags.extend(_missing_flags(page))
    base = " AND ".join(where)
    source = "post_translations t"
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
    return _assemble(ctes, flags, desc, log_topic, args, arg)


def _missing_flags(page: PageWindow) -> list[str]:
    flags = []
    if page.after is not None:
        flags.append(f"SELECT {MISSING_AFTER}, NULL::bigint, NULL::text, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM a)")
    if page.before is not None:
        flags.append(f"SELECT {MISSING_BEFORE}, NULL::bigint, NULL::text, 0::bigint WHERE NOT EXISTS (SELECT 1 FROM b)")
    return flags


def _assemble(ctes: list[str], flags: list[str], desc: str, log_topic: str | None, args: list, arg) -> tuple[str, list]:
    if log_topic is not None:
        flags.append(f"SELECT {LOG_POSITION}, NULL::bigint, {logposition.stored_sql(arg(log_topic))}, 0::bigint")
    items = f"SELECT {ITEM} AS kind, post_id, lean, row_number() OVER (ORDER BY {desc}) AS pos FROM page"
    sql = (
        f"WITH {', '.join(ctes)}\n"
        f"SELECT kind, post_id, lean FROM ({' UNION ALL '.join([items, *flags])}) r ORDER BY kind, pos"
    )
    return sql, args


def _tier_bound(tier: int, ref: str, op: str) -> str:
    """Rows of ``tier`` strictly later (``op`` '<') or earlier ('>') in search order than the
    position in CTE ``ref`` (tier, at, id), as one row comparison on (published_at, post_id), so
    the feed index can start its walk there: the whole tier ('-infinity'/'infinity' bounds),
    nothing, or the part past the position when it lies in this tier."""
    whole, none = ("'infinity'", "'-infinity'") if op == "<" else ("'-infinity'", "'infinity'")
    earlier = "<" if op == "<" else ">"
    return (
        f"(t.published_at, t.post_id) {op} (SELECT CASE WHEN x.tier = {tier} THEN x.at "
        f"WHEN x.tier {earlier} {tier} THEN {whole}::timestamptz ELSE {none}::timestamptz END, "
        f"CASE WHEN x.tier = {tier} THEN x.id ELSE 0 END FROM {ref} x)"
    )


def _search_query(
    lang: str, filters: Filters, page: PageWindow, search: Search, log_topic: str | None
) -> tuple[str, list]:
    args: list = []
    arg = _binder(args)
    q = f"websearch_to_tsquery({arg(search.config)}::regconfig, {arg(search.text)})"
    # The locale is a literal (it is one of the served locales), so the planner can use that
    # locale's partial text indexes (migration 0002).
    locale = sql_literal(lang)
    # Planned for the actual words every time (see search_generic_plan_guard, migration 0002).
    base = " AND ".join([*_filters(locale, filters, arg), f"({q} IS NOT NULL OR search_generic_plan_guard())"])
    # A title or lede that matches must not be excluded by a `-word` elsewhere in the text. The
    # query is a constant (websearch_to_tsquery with a configuration is immutable), so without
    # a negation this folds to TRUE at plan time and costs nothing per row.
    whole = f"(strpos(({q})::text, '!') = 0 OR t.tsv @@ {q})"

    def tier_rows(tier: int, bounds: list[tuple[str, str]]) -> str:
        conds = [base, f"{TIERS[tier]} @@ {q}", *(f"NOT {col} @@ {q}" for col in TIERS[:tier])]
        if tier < len(TIERS) - 1:
            conds.append(whole)
        conds += [_tier_bound(tier, ref, op) for ref, op in bounds]
        return " AND ".join(conds)

    ctes: list[str] = []
    bounds: list[tuple[str, str]] = []
    if page.after is not None:
        ctes.append(f"a AS ({_SEARCH_CURSOR.format(tsq=q, lang=locale, id=arg(page.after) + '::bigint')})")
        bounds.append(("a", ">"))
    if page.before is not None:
        ctes.append(f"b AS ({_SEARCH_CURSOR.format(tsq=q, lang=locale, id=arg(page.before) + '::bigint')})")
        bounds.append(("b", "<"))
    limit = f"{arg(page.limit)}::integer"
    # `after` alone walks towards better-ranked items: the nearest ones, then shown best first.
    towards_best = page.after is not None and page.before is None
    within = "ASC" if towards_best else "DESC"
    order = range(len(TIERS) - 1, -1, -1) if towards_best else range(len(TIERS))
    # Without `after`, one row more than the page says whether older results follow, so the
    # first page (and every `before` page) needs no separate probe (fewer scans to plan).
    plus_one = page.after is None
    fetch = f"({limit} + 1)" if plus_one else limit
    # Each tier's page in index order, tiers in rank order. No ORDER BY over the union: the
    # Append returns its branches in order and stops once enough rows are out, so a later
    # tier is not read at all when an earlier one fills the page (each branch has its own
    # LIMIT, so no parallel Append can interleave them); the rows are ordered below.
    branches = " UNION ALL ".join(
        f"(SELECT {k} AS k0, t.published_at AS k1, t.post_id AS k2, t.post_id, t.lean FROM post_translations t "
        f"WHERE {tier_rows(k, bounds)} ORDER BY t.published_at {within}, t.post_id {within} LIMIT {fetch})"
        for k in order
    )
    ctes.append(f"fetched AS (SELECT * FROM ({branches}) u LIMIT {fetch})")
    ctes.append(
        f"page AS (SELECT * FROM fetched ORDER BY k0 {'DESC' if towards_best else 'ASC'}, k1 {within}, k2 {within} LIMIT {limit})"
    )
    flags = _missing_flags(page)
    beyond = []
    if plus_one:
        flags.append(
            f"SELECT {OLDER}, NULL::bigint, NULL::text, 0::bigint WHERE (SELECT count(*) FROM fetched) > {limit}"
        )
    else:
        # The page's last item in search order, and whether anything lies past it.
        ctes.append("lo AS (SELECT k0 AS tier, k1 AS at, k2 AS id FROM page ORDER BY k0 DESC, k1 ASC, k2 ASC LIMIT 1)")
        beyond.append(("lo", "<", OLDER))
    if page.after is not None or page.before is not None:
        ctes.append("hi AS (SELECT k0 AS tier, k1 AS at, k2 AS id FROM page ORDER BY k0 ASC, k1 DESC, k2 DESC LIMIT 1)")
        beyond.append(("hi", ">", NEWER))
    for ref, op, kind in beyond:
        exists = " UNION ALL ".join(
            f"(SELECT 1 FROM post_translations t WHERE {tier_rows(k, [(ref, op)])} LIMIT 1)" for k in range(len(TIERS))
        )
        flags.append(f"SELECT {kind}, NULL::bigint, NULL::text, 0::bigint WHERE EXISTS ({exists})")
    return _assemble(ctes, flags, "k0 ASC, k1 DESC, k2 DESC", log_topic, args, arg)


# docs/api.md#webhooks: the caller's workspace's endpoints ($1), not removed ones, one ($2) or
# all (NULL), each with the dispatcher's delivery row (platform state, NULL before the dispatcher
# has taken it up); always one row more or less: the first carries the mark ($3 the topic).
SELECT_WEBHOOK_ENDPOINTS = f"""
SELECT {logposition.stored_sql("$3")} AS log_position, x.*
FROM (SELECT 1) one LEFT JOIN (
    SELECT e.id, e.version, e.url, e.description, e.locales, e.tickers, e.categories, e.status, e.secret_generation,
           e.created_at,
           d.state, d.disabled_version, d.disabled_reason, d.disabled_at, d.failing_since, d.next_attempt_at,
           d.attempt, d.delivered, d.last_delivered_at, d.cursor
    FROM webhook_endpoints e LEFT JOIN webhook_deliveries d ON d.endpoint_id = e.id
    WHERE e.workspace_id = $1 AND e.status <> 'removed' AND ($2::text IS NULL OR e.id = $2)
) x ON true
ORDER BY x.created_at, x.id
"""

# The latest $3 attempts of the endpoint $2, newest first, when it is one of the workspace $1's
# and not removed (``visible``: else the 404 of an endpoint the caller cannot see); the first row
# carries the mark ($4 the topic).
SELECT_WEBHOOK_ATTEMPTS = f"""
SELECT {logposition.stored_sql("$4")} AS log_position, v.visible, a.webhook_id, a.attempt, a.attempted_at, a.outcome, a.status, a.latency_ms, a.error,
       a.next_attempt_at, a.type, a.response_excerpt
FROM (SELECT EXISTS (
    SELECT 1 FROM webhook_endpoints e WHERE e.id = $2 AND e.workspace_id = $1 AND e.status <> 'removed'
) AS visible) v
LEFT JOIN LATERAL (
    SELECT * FROM webhook_attempts t WHERE v.visible AND t.endpoint_id = $2 ORDER BY t.id DESC LIMIT $3
) a ON true
ORDER BY a.id DESC
"""
