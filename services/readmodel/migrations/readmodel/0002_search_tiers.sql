-- Search at scale: ranking tiers by where the words match, and per-locale text indexes.
--
-- A search page ranks matches in three tiers (the title matches the whole query, else the
-- lede does, else the whole text does), newest first within a tier, so a page is read from
-- an index in its order and its cost does not grow with the number of matches. Each tier has
-- its own tsvector, derived from the one the projector computes (title weight A, lede B,
-- body C) by the database, so the text is parsed once per write.
ALTER TABLE post_translations
    ADD COLUMN tsv_title tsvector GENERATED ALWAYS AS (ts_filter(tsv, '{a}')) STORED,
    ADD COLUMN tsv_lede  tsvector GENERATED ALWAYS AS (ts_filter(tsv, '{b}')) STORED;

-- The projector computes the tsvector only when the searchable text changed (a re-render of
-- category names keeps it): the hash of (text-search configuration, title, lede, body).
ALTER TABLE post_translations ADD COLUMN text_hash bytea;

-- GIN upkeep: fastupdate stays on with the default 4 MB pending list. Measured with the
-- projector benchmark (10,000 post events x 3 locales, then 100 events/s; load average 3.5-4
-- from other work): default 492 events/s, event-to-row p99 333 ms; a 256 kB pending list
-- 218 events/s, p99 939 ms (more frequent merges by the writing transaction). A synthetic
-- upsert loop had suggested the opposite; the real projector decides. fastupdate off was
-- measured slower still in that loop (480-710 rows/s against 1,500-1,600).

-- Locale-selective text indexes: one partial GIN index per locale and tier column, so a
-- bitmap reads only the searched locale's postings and the planner's match estimates are
-- per locale. The projector calls this for every locale it stores (DDL only when a locale is
-- new); the search statement names the locale as a literal so the planner can use them.
CREATE FUNCTION ensure_search_indexes(code text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    tag text := lower(regexp_replace(code, '[^A-Za-z0-9]', '_', 'g')) || '_' || left(md5(code), 6);
    col text;
    name text;
BEGIN
    FOREACH col IN ARRAY ARRAY['tsv_title', 'tsv_lede', 'tsv'] LOOP
        name := 'pt_search_' || col || '_' || tag;
        -- Checked first: CREATE INDEX IF NOT EXISTS would lock the table even when it exists.
        IF to_regclass(quote_ident(name)) IS NULL THEN
            EXECUTE format('CREATE INDEX %I ON post_translations USING gin (%I) WHERE visible AND lang = %L', name, col, code);
        END IF;
    END LOOP;
END
$$;

DROP INDEX post_translations_tsv;
SELECT ensure_search_indexes(code) FROM locales;

-- A search is planned for its actual words: a common word walks the feed index, a rare one
-- reads a text index, and no single plan is good for both. PostgreSQL may switch a prepared
-- statement to one generic plan (planned without the parameter values) once that looks no
-- costlier than the custom plans; the search statement guards every branch with
-- `(<the query> IS NOT NULL OR search_generic_plan_guard())`, which folds to TRUE when the
-- words are known (custom plans: no cost, never called) and costs this function's huge
-- declared COST per row in a generic plan, so the generic plan never looks cheaper.
CREATE FUNCTION search_generic_plan_guard() RETURNS boolean LANGUAGE plpgsql STABLE COST 1000000 AS $$
BEGIN
    RETURN false;
END
$$;
