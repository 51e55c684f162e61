"""Every statement the projector writes the read model with. Plain SQL, unqualified names
(the connection's search_path points at the read-model schema)."""

LOCK_POSITION = """
INSERT INTO positions (topic, partition, next_offset) VALUES ($1, $2, 0)
ON CONFLICT (topic, partition) DO NOTHING
"""
SELECT_POSITION_FOR_UPDATE = "SELECT next_offset FROM positions WHERE topic = $1 AND partition = $2 FOR UPDATE"
SAVE_POSITION = "UPDATE positions SET next_offset = $3, updated_at = now() WHERE topic = $1 AND partition = $2"
SELECT_POSITIONS = "SELECT topic, partition, next_offset FROM positions WHERE topic = ANY($1::text[])"

INSERT_DEAD_LETTER = """
INSERT INTO dead_letters (topic, partition, "offset", key, value, reason_kind, reason)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (topic, partition, "offset") DO NOTHING
"""

ADVISORY_XACT_LOCK = "SELECT pg_advisory_xact_lock($1)"
ADVISORY_XACT_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared($1)"

BUMP_STAMPS = "UPDATE change_stamps SET stamp = stamp + 1 WHERE name = ANY($1::text[])"

# --------------------------------------------------------------------------- posts

SELECT_POSTS_FOR_UPDATE = """
SELECT id, version, status, published_at, sentiment, tickers
FROM posts WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE
"""

UPSERT_POST = """
INSERT INTO posts (id, version, status, published_at, sentiment, importance, tickers, snapshot)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
ON CONFLICT (id) DO UPDATE SET
    version = EXCLUDED.version, status = EXCLUDED.status, published_at = EXCLUDED.published_at,
    sentiment = EXCLUDED.sentiment, importance = EXCLUDED.importance, tickers = EXCLUDED.tickers,
    snapshot = EXCLUDED.snapshot
WHERE posts.version < EXCLUDED.version
"""

# The first event that makes a translation visible is remembered forever (COALESCE):
# the stream announces post.created for exactly that event, and never again.
# The tsvector (title A, lede B, body C; migration 0002 derives the per-tier vectors from it)
# is computed only when the searchable text changed: $19 is the hash of (configuration, title, lede, body); a row that already holds
# that hash keeps its vector (COALESCE evaluates the computation only when needed).
def _tsv(config: str, title: str, lede: str, body: str) -> str:
    return (
        f"setweight(to_tsvector({config}::regconfig, {title}), 'A') || setweight(to_tsvector({config}::regconfig, {lede}), 'B') "
        f"|| setweight(to_tsvector({config}::regconfig, {body}), 'C')"
    )


UPSERT_TRANSLATION = """
INSERT INTO post_translations (
    post_id, lang, slug, published_at, importance, sentiment, visible,
    category_slugs, tickers, hashtags, tsv, lean, detail, announced_partition, announced_offset, text_hash)
VALUES (
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
    COALESCE(
        (SELECT o.tsv FROM post_translations o WHERE o.post_id = $1 AND o.lang = $2 AND o.text_hash = $19::bytea),
        {tsv}),
    $15, $16, $17, $18, $19::bytea)
ON CONFLICT (post_id, lang) DO UPDATE SET
    slug = EXCLUDED.slug, published_at = EXCLUDED.published_at, importance = EXCLUDED.importance,
    sentiment = EXCLUDED.sentiment, visible = EXCLUDED.visible, category_slugs = EXCLUDED.category_slugs,
    tickers = EXCLUDED.tickers, hashtags = EXCLUDED.hashtags, tsv = EXCLUDED.tsv, text_hash = EXCLUDED.text_hash,
    lean = EXCLUDED.lean, detail = EXCLUDED.detail,
    announced_partition = COALESCE(post_translations.announced_partition, EXCLUDED.announced_partition),
    announced_offset = COALESCE(post_translations.announced_offset, EXCLUDED.announced_offset)
""".replace("{tsv}", _tsv("$11", "$12", "$13", "$14"))

# `tickerwire projector rebuild` bulk-loads post translations: the rows (the parameters of
# UPSERT_TRANSLATION, in order) are copied into a session's staging table, then moved with
# one INSERT that computes the tsvector exactly as UPSERT_TRANSLATION does.
TRANSLATION_STAGING_COLUMNS = (
    "post_id", "lang", "slug", "published_at", "importance", "sentiment", "visible", "category_slugs", "tickers",
    "hashtags", "ts_config", "title", "lede", "body", "lean", "detail", "announced_partition", "announced_offset",
    "text_hash",
)
CREATE_TRANSLATION_STAGING = """
CREATE TEMP TABLE IF NOT EXISTS translation_staging (
    post_id bigint, lang text, slug text, published_at timestamptz, importance integer, sentiment text,
    visible boolean, category_slugs text[], tickers text[], hashtags text[], ts_config text, title text,
    lede text, body text, lean text, detail text, announced_partition integer, announced_offset bigint,
    text_hash bytea)
"""
MOVE_TRANSLATION_STAGING = """
INSERT INTO post_translations (
    post_id, lang, slug, published_at, importance, sentiment, visible,
    category_slugs, tickers, hashtags, tsv, lean, detail, announced_partition, announced_offset, text_hash)
SELECT s.post_id, s.lang, s.slug, s.published_at, s.importance, s.sentiment, s.visible, s.category_slugs, s.tickers,
       s.hashtags, {tsv}, s.lean, s.detail, s.announced_partition, s.announced_offset, s.text_hash
FROM translation_staging s
""".replace("{tsv}", _tsv("s.ts_config", "s.title", "s.lede", "s.body"))
# The same, taking the tsvector from the live schema's row where that row was computed from the
# same text (equal text_hash), as UPSERT_TRANSLATION does within one schema. {live} is quoted.
MOVE_TRANSLATION_STAGING_REUSING = """
INSERT INTO post_translations (
    post_id, lang, slug, published_at, importance, sentiment, visible,
    category_slugs, tickers, hashtags, tsv, lean, detail, announced_partition, announced_offset, text_hash)
SELECT s.post_id, s.lang, s.slug, s.published_at, s.importance, s.sentiment, s.visible, s.category_slugs, s.tickers,
       s.hashtags, COALESCE(o.tsv, {tsv}), s.lean, s.detail, s.announced_partition, s.announced_offset, s.text_hash
FROM translation_staging s
LEFT JOIN {live}.post_translations o ON o.post_id = s.post_id AND o.lang = s.lang AND o.text_hash = s.text_hash
""".replace("{tsv}", _tsv("s.ts_config", "s.title", "s.lede", "s.body"))
TRUNCATE_TRANSLATION_STAGING = "TRUNCATE translation_staging"
POST_COLUMNS = ("id", "version", "status", "published_at", "sentiment", "importance", "tickers", "snapshot")
SAVE_POSITIONS = """
INSERT INTO positions (topic, partition, next_offset)
SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[])
ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()
"""
# The read model's secondary indexes, dropped before a bulk load and built after it.
SELECT_SECONDARY_INDEXES = """
SELECT i.relname AS name, pg_get_indexdef(i.oid) AS definition
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
WHERE t.relname = ANY($1::text[]) AND t.relnamespace = current_schema()::regnamespace AND NOT x.indisprimary
  AND NOT x.indisunique
ORDER BY i.relname
"""

# A locale dropped from a post's snapshot stops being visible; its row (and its
# announcement) stays, so a later re-add is not announced twice. One post per execution
# (executemany): equality on the primary key's first column keeps every plan, generic ones
# included, on the primary key. A statement over an array of posts got a generic plan that
# ANDed the primary key with the whole feed index (`WHERE visible`), a cost that grew with the
# table (3.7 ms per batch at 30,000 rows).
HIDE_DROPPED_TRANSLATIONS = """
UPDATE post_translations t SET visible = false
WHERE t.post_id = $1 AND t.visible AND t.lang <> ALL($2::text[])
"""

# The end of every batch, in one statement (one round trip right before the commit): the rows
# that batches of other partitions write too (ticker counts, sentiment buckets, change stamps;
# their locks are held until the commit) and the partition's position. Arrays: $4/$5 ticker
# deltas, $6/$7/$8 sentiment bucket deltas (each sorted, so writers lock in one order), $9 the
# stamps to bump. A counter never goes below zero.
FINISH_BATCH = """
WITH tickers AS (
    INSERT INTO ticker_post_counts AS c (ticker, post_count)
    SELECT u.ticker, GREATEST(u.delta, 0) FROM unnest($4::text[], $5::integer[]) AS u(ticker, delta)
    ON CONFLICT (ticker) DO UPDATE
    SET post_count = GREATEST(c.post_count + ($5::integer[])[array_position($4::text[], EXCLUDED.ticker)], 0)
), buckets AS (
    INSERT INTO sentiment_buckets AS b (bucket, sentiment, count)
    SELECT u.bucket, u.sentiment, GREATEST(u.delta, 0)
    FROM unnest($6::timestamptz[], $7::text[], $8::integer[]) AS u(bucket, sentiment, delta)
    ON CONFLICT (bucket, sentiment) DO UPDATE
    SET count = GREATEST(b.count + (
        SELECT u.delta FROM unnest($6::timestamptz[], $7::text[], $8::integer[]) AS u(bucket, sentiment, delta)
        WHERE u.bucket = EXCLUDED.bucket AND u.sentiment = EXCLUDED.sentiment), 0)
), stamps AS (
    UPDATE change_stamps SET stamp = stamp + 1 WHERE name = ANY($9::text[])
)
UPDATE positions SET next_offset = $3, updated_at = now() WHERE topic = $1 AND partition = $2
"""

SELECT_POST_SNAPSHOTS_BY_CATEGORY = """
SELECT snapshot FROM posts WHERE snapshot->'categories' ?| $1::text[] ORDER BY id
"""

SELECT_POST_SNAPSHOTS_WITH_CATEGORIES = """
SELECT snapshot FROM posts WHERE jsonb_array_length(snapshot->'categories') > 0 ORDER BY id
"""

SELECT_TAXONOMY = "SELECT slug, version, is_group, group_slug, position, names FROM categories"
# The listed locales in listing order (as the API lists them), for schemas.readmodel.default_locale.
SELECT_LISTED_LOCALES = """
SELECT code, is_default FROM locales
WHERE active AND web_channel
ORDER BY position, code
"""

# --------------------------------------------------------------------------- catalog

SELECT_CATEGORY_GROUPS = "SELECT slug, group_slug FROM categories WHERE slug = ANY($1::text[])"

UPSERT_CATEGORY = """
INSERT INTO categories (slug, version, is_group, group_slug, position, names)
VALUES ($1, $2, $3, $4, $5, $6::jsonb)
ON CONFLICT (slug) DO UPDATE SET
    version = EXCLUDED.version, is_group = EXCLUDED.is_group, group_slug = EXCLUDED.group_slug,
    position = EXCLUDED.position, names = EXCLUDED.names
WHERE categories.version < EXCLUDED.version
RETURNING slug
"""

# Set-based: one statement for the whole batch (arrays in, changed codes out).
UPSERT_LOCALE = """
INSERT INTO locales AS l (code, version, name, native_name, country_code, direction, active, web_channel, is_default, position)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::boolean[], $8::boolean[], $9::boolean[], $10::integer[])
ON CONFLICT (code) DO UPDATE SET
    version = EXCLUDED.version, name = EXCLUDED.name, native_name = EXCLUDED.native_name,
    country_code = EXCLUDED.country_code, direction = EXCLUDED.direction, active = EXCLUDED.active,
    web_channel = EXCLUDED.web_channel, is_default = EXCLUDED.is_default, position = EXCLUDED.position
WHERE l.version < EXCLUDED.version
RETURNING code
"""
# The per-locale partial text indexes of a locale (migration 0002); DDL only for a new locale.
ENSURE_SEARCH_INDEXES = "SELECT ensure_search_indexes(code) FROM unnest($1::text[]) AS code"

UPSERT_TOKEN = """
INSERT INTO tokens AS t (ticker, version, name, logo_url, market_cap_rank, exchange_listings, categories,
                         genesis_date, primary_ecosystem, homepage_url, description)
SELECT u.ticker, u.version, u.name, u.logo_url, u.market_cap_rank,
       ARRAY(SELECT jsonb_array_elements_text(u.exchange_listings::jsonb)),
       ARRAY(SELECT jsonb_array_elements_text(u.categories::jsonb)),
       u.genesis_date, u.primary_ecosystem::jsonb, u.homepage_url, u.description
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::integer[], $6::text[], $7::text[],
            $8::date[], $9::text[], $10::text[], $11::text[])
     AS u(ticker, version, name, logo_url, market_cap_rank, exchange_listings, categories,
          genesis_date, primary_ecosystem, homepage_url, description)
ON CONFLICT (ticker) DO UPDATE SET
    version = EXCLUDED.version, name = EXCLUDED.name, logo_url = EXCLUDED.logo_url,
    market_cap_rank = EXCLUDED.market_cap_rank, exchange_listings = EXCLUDED.exchange_listings,
    categories = EXCLUDED.categories, genesis_date = EXCLUDED.genesis_date,
    primary_ecosystem = EXCLUDED.primary_ecosystem, homepage_url = EXCLUDED.homepage_url,
    description = EXCLUDED.description
WHERE t.version < EXCLUDED.version
RETURNING ticker
"""

# --------------------------------------------------------------------------- access

UPSERT_WORKSPACE = """
INSERT INTO workspaces AS w (id, version, name, status, rate_limit_per_minute, daily_quota, stream_connection_limit)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::integer[], $6::integer[], $7::integer[])
ON CONFLICT (id) DO UPDATE SET
    version = EXCLUDED.version, name = EXCLUDED.name, status = EXCLUDED.status,
    rate_limit_per_minute = EXCLUDED.rate_limit_per_minute, daily_quota = EXCLUDED.daily_quota,
    stream_connection_limit = EXCLUDED.stream_connection_limit
WHERE w.version < EXCLUDED.version
RETURNING id
"""

UPSERT_API_KEY = """
INSERT INTO api_keys AS k (id, version, workspace_id, key_hash, display_prefix, issued_at, revoked_at)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[])
ON CONFLICT (id) DO UPDATE SET
    version = EXCLUDED.version, workspace_id = EXCLUDED.workspace_id, key_hash = EXCLUDED.key_hash,
    display_prefix = EXCLUDED.display_prefix, issued_at = EXCLUDED.issued_at, revoked_at = EXCLUDED.revoked_at
WHERE k.version < EXCLUDED.version
RETURNING id
"""

UPSERT_EMBED = """
INSERT INTO embeds AS e (id, version, workspace_id, kind, created_at)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[])
ON CONFLICT (id) DO UPDATE SET
    version = EXCLUDED.version, workspace_id = EXCLUDED.workspace_id, kind = EXCLUDED.kind,
    created_at = EXCLUDED.created_at
WHERE e.version < EXCLUDED.version
RETURNING id
"""

UPSERT_HEARTBEAT = """
INSERT INTO heartbeats AS h (embed_id, workspace_id, landed_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])
ON CONFLICT (embed_id) DO UPDATE SET landed_at = EXCLUDED.landed_at, workspace_id = EXCLUDED.workspace_id
WHERE h.landed_at < EXCLUDED.landed_at
RETURNING embed_id
"""

# --------------------------------------------------------------------------- badge sweeper

# One tick of spec 3.2, on the database clock: each workspace's status from the latest heartbeat of an embed it owns.
SWEEP_BADGES = """
WITH last AS (
    SELECT e.workspace_id, max(h.landed_at) AS landed_at
    FROM embeds e JOIN heartbeats h ON h.embed_id = e.id AND h.workspace_id = e.workspace_id
    GROUP BY e.workspace_id
), computed AS (
    SELECT w.id,
           CASE
               WHEN l.landed_at IS NULL THEN 'unknown'
               WHEN l.landed_at >= now() - interval '48 hours' THEN 'ok'
               WHEN l.landed_at >= now() - interval '72 hours' THEN 'warning'
               ELSE 'missing'
           END AS status
    FROM workspaces w LEFT JOIN last l ON l.workspace_id = w.id
)
UPDATE workspaces w SET badge_status = c.status, badge_swept_at = now()
FROM computed c WHERE c.id = w.id
RETURNING w.id, w.badge_status
"""
