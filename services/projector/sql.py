"""Every statement the projector writes the read model with. Plain SQL, unqualified names
(the connection's search_path points at the read-model schema). Positions are read and
written through :mod:`tickerwire.services.readmodel.positions`; the written rows' columns and
placeholders come from their dataclasses in :mod:`.rows`."""

from tickerwire.services.readmodel import positions

from .rows import (
    FILTER_ARRAYS,
    TEXT_INPUTS,
    ApiKeyRow,
    EmbedRow,
    HeartbeatRow,
    LocaleRow,
    PostRow,
    TokenRow,
    TranslationRow,
    WebhookEndpointRow,
    WorkspaceRow,
    upsert_from_arrays,
)

INSERT_DEAD_LETTER = """
INSERT INTO dead_letters (topic, partition, "offset", key, value, reason_kind, reason)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (topic, partition, "offset") DO NOTHING
"""

ADVISORY_XACT_LOCK = "SELECT pg_advisory_xact_lock($1)"
ADVISORY_XACT_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared($1)"

# Bumps the named change stamps (the 0003 trigger notifies readers); ``{names}`` the text[] parameter.
_BUMP_STAMPS = "UPDATE change_stamps SET stamp = stamp + 1 WHERE name = ANY({names}::text[])"
BUMP_STAMPS = _BUMP_STAMPS.format(names="$1")

# --------------------------------------------------------------------------- posts

SELECT_POSTS_FOR_UPDATE = """
SELECT id, version, status, published_at, sentiment, tickers
FROM posts WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE
"""

# Set-based: every post of the batch in one statement (PostRow.batch_arrays).
UPSERT_POSTS = f"""
INSERT INTO posts ({", ".join(PostRow.columns())})
SELECT {", ".join(PostRow.batch_value(c) for c in PostRow.columns())} FROM {PostRow.unnest_batch()}
ON CONFLICT (id) DO UPDATE SET {", ".join(f"{c} = EXCLUDED.{c}" for c in PostRow.columns() if c != "id")}
WHERE posts.version < EXCLUDED.version
"""


# The first event that makes a translation visible is remembered forever (COALESCE):
# the stream announces post.created for exactly that event, and never again.
# The tsvector (title A, lede B, body C; migration 0002 derives the per-tier vectors from it)
# is computed only when the searchable text changed: text_hash is the hash of (configuration,
# title, lede, body); a row that already holds that hash keeps its vector (COALESCE evaluates
# the computation only when needed).
def _tsv(config: str, title: str, lede: str, body: str) -> str:
    return (
        f"setweight(to_tsvector({config}::regconfig, {title}), 'A') || setweight(to_tsvector({config}::regconfig, {lede}), 'B') "
        f"|| setweight(to_tsvector({config}::regconfig, {body}), 'C')"
    )


#: The stored columns of post_translations written from a TranslationRow (all but the text inputs).
_STORED = [c for c in TranslationRow.columns() if c not in TEXT_INPUTS]
_FIRST_KEPT = ("announced_partition", "announced_offset")

# Set-based: every locale row of the batch in one statement (TranslationRow.batch_arrays; a
# batch never holds two rows of one post and locale). The stored vector is looked up per row by
# primary key, a subquery rather than a join (see below).
UPSERT_TRANSLATIONS = f"""
INSERT INTO post_translations ({", ".join(_STORED)}, tsv)
SELECT {", ".join(TranslationRow.batch_value(c) for c in _STORED)},
    COALESCE(
        (SELECT o.tsv FROM post_translations o
         WHERE o.post_id = u.post_id AND o.lang = u.lang AND o.text_hash = u.text_hash),
        {_tsv(*(f"u.{c}" for c in TEXT_INPUTS))})
FROM {TranslationRow.unnest_batch()}
ON CONFLICT (post_id, lang) DO UPDATE SET
    {", ".join(f"{c} = EXCLUDED.{c}" for c in [*_STORED, "tsv"] if c not in ("post_id", "lang", *_FIRST_KEPT))},
    {", ".join(f"{c} = COALESCE(post_translations.{c}, EXCLUDED.{c})" for c in _FIRST_KEPT)}
"""

# `tickerwire projector rebuild` bulk-loads post translations with COPY, each row carrying its
# tsvector: per chunk, one statement computes the vectors exactly as UPSERT_TRANSLATIONS does
# (parameters: arrays of the row numbers and of the columns VECTOR_INPUTS name), and the rows go
# straight into post_translations (TRANSLATION_COPY_COLUMNS), written once.
VECTOR_INPUTS = ("post_id", "lang", "text_hash", *TEXT_INPUTS)
_VECTOR_ARGS = f"""unnest($1::int[], $2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::text[], $8::text[])
    AS s(i, {", ".join(VECTOR_INPUTS)})"""
TRANSLATION_VECTORS = f"""
SELECT {_tsv(*("s." + c for c in TEXT_INPUTS))} AS tsv FROM {_VECTOR_ARGS} ORDER BY s.i
"""
# The same, taking the tsvector from the live schema's row where that row was computed from the
# same text (equal text_hash), as UPSERT_TRANSLATIONS does within one schema. {live} is quoted.
# A subquery per row, not a join: a join is planned as a hash join that scans the whole live
# table for every chunk (quadratic in the read model's size); the subquery is one primary-key
# lookup per row whatever the sizes.
TRANSLATION_VECTORS_REUSING = f"""
SELECT COALESCE(
    (SELECT o.tsv FROM {{live}}.post_translations o
     WHERE o.post_id = s.post_id AND o.lang = s.lang AND o.text_hash = s.text_hash),
    {_tsv(*("s." + c for c in TEXT_INPUTS))}) AS tsv
FROM {_VECTOR_ARGS} ORDER BY s.i
"""
TRANSLATION_COPY_COLUMNS = (*_STORED, "tsv")
# Whether schema $1's post_translations has text_hash (migration 0002), so its vectors can be reused.
SCHEMA_HAS_TEXT_HASH = """
SELECT count(*) = 1 FROM information_schema.columns
WHERE table_schema = $1 AND table_name = 'post_translations' AND column_name = 'text_hash'
"""
POST_COLUMNS = PostRow.columns()
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
FINISH_BATCH = (
    """
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
    """
    + _BUMP_STAMPS.format(names="$9")
    + """
)
"""
    + positions.SAVE_SQL
    + "\n"
)

SELECT_POST_SNAPSHOTS_BY_CATEGORY = """
SELECT snapshot FROM posts WHERE snapshot->'categories' ?| $1::text[] ORDER BY id
"""

SELECT_POST_SNAPSHOTS_WITH_CATEGORIES = """
SELECT snapshot FROM posts WHERE jsonb_array_length(snapshot->'categories') > 0 ORDER BY id
"""


# --------------------------------------------------------------------------- catalog

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
UPSERT_LOCALE = upsert_from_arrays(LocaleRow, "code", "t.version < EXCLUDED.version")
# The per-locale partial text indexes of a locale (migration 0002); DDL only for a new locale.
ENSURE_SEARCH_INDEXES = "SELECT ensure_search_indexes(code) FROM unnest($1::text[]) AS code"

# The list and object columns arrive as JSON text.
UPSERT_TOKEN = upsert_from_arrays(
    TokenRow,
    "ticker",
    "t.version < EXCLUDED.version",
    select={
        "exchange_listings": "ARRAY(SELECT jsonb_array_elements_text(u.exchange_listings::jsonb))",
        "categories": "ARRAY(SELECT jsonb_array_elements_text(u.categories::jsonb))",
        "primary_ecosystem": "u.primary_ecosystem::jsonb",
    },
)

# --------------------------------------------------------------------------- access

UPSERT_WORKSPACE = upsert_from_arrays(WorkspaceRow, "id", "t.version < EXCLUDED.version")
UPSERT_API_KEY = upsert_from_arrays(ApiKeyRow, "id", "t.version < EXCLUDED.version")
UPSERT_EMBED = upsert_from_arrays(EmbedRow, "id", "t.version < EXCLUDED.version")
UPSERT_HEARTBEAT = upsert_from_arrays(HeartbeatRow, "embed_id", "t.landed_at < EXCLUDED.landed_at")
UPSERT_WEBHOOK_ENDPOINT = upsert_from_arrays(
    WebhookEndpointRow, "id", "t.version < EXCLUDED.version", select=FILTER_ARRAYS
)

# --------------------------------------------------------------------------- badge sweeper

# One tick of docs/api.md#badge-status, on the database clock: each workspace's status from the latest heartbeat of an embed it owns.
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
