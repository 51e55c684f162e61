-- The read model. Written only by the projector; read by the API and the stream.
-- Applied with search_path set to the target schema (normally "rm"), so that
-- `tickerwire projector rebuild` can build a fresh copy beside the live one.

-- Kafka positions, committed in the same transaction as the rows they produced.
CREATE TABLE positions (
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    next_offset  bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);

-- Poison events: set aside with their reason, never retried automatically.
CREATE TABLE dead_letters (
    id           bigserial   PRIMARY KEY,
    topic        text        NOT NULL,
    partition    integer     NOT NULL,
    "offset"     bigint      NOT NULL,
    key          bytea,
    value        bytea,
    reason_kind  text        NOT NULL,
    reason       text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (topic, partition, "offset")
);

CREATE TABLE locales (
    code          text    PRIMARY KEY,
    version       bigint  NOT NULL,
    name          text    NOT NULL,
    native_name   text    NOT NULL,
    country_code  text    NOT NULL,
    direction     text    NOT NULL,
    active        boolean NOT NULL,
    web_channel   boolean NOT NULL,
    is_default    boolean NOT NULL,
    position      integer NOT NULL
);

CREATE TABLE categories (
    slug        text    PRIMARY KEY,
    version     bigint  NOT NULL,
    is_group    boolean NOT NULL,
    group_slug  text,
    position    integer NOT NULL,
    names       jsonb   NOT NULL
);

-- One row per post: the latest snapshot, and what the derived counters last counted.
CREATE TABLE posts (
    id            bigint      PRIMARY KEY,
    version       bigint      NOT NULL,
    status        text        NOT NULL,
    published_at  timestamptz,
    sentiment     text        NOT NULL,
    importance    integer     NOT NULL,
    tickers       text[]      NOT NULL,
    snapshot      jsonb       NOT NULL
);

-- One row per post and locale, shaped for the reads: filter columns, a weighted
-- tsvector, and the partner-facing JSON (lean and detail) serialized once at write time.
CREATE TABLE post_translations (
    post_id              bigint      NOT NULL,
    lang                 text        NOT NULL,
    slug                 text        NOT NULL,
    published_at         timestamptz,
    importance           integer     NOT NULL,
    sentiment            text        NOT NULL,
    visible              boolean     NOT NULL,
    category_slugs       text[]      NOT NULL,
    tickers              text[]      NOT NULL,
    hashtags             text[]      NOT NULL,
    tsv                  tsvector    NOT NULL,
    lean                 text        NOT NULL,
    detail               text        NOT NULL,
    -- The log position of the event that first made this translation visible:
    -- the stream announces post.created for exactly that event.
    announced_partition  integer,
    announced_offset     bigint,
    PRIMARY KEY (post_id, lang)
);
CREATE INDEX post_translations_feed ON post_translations (lang, published_at DESC, post_id DESC) WHERE visible;
CREATE INDEX post_translations_slug ON post_translations (slug, lang);
CREATE INDEX post_translations_tsv ON post_translations USING gin (tsv) WHERE visible;
CREATE INDEX post_translations_categories ON post_translations USING gin (category_slugs) WHERE visible;
CREATE INDEX post_translations_tickers ON post_translations USING gin (tickers) WHERE visible;
CREATE INDEX post_translations_hashtags ON post_translations USING gin (hashtags) WHERE visible;

CREATE TABLE tokens (
    ticker             text    PRIMARY KEY,
    version            bigint  NOT NULL,
    name               text    NOT NULL,
    logo_url           text    NOT NULL,
    market_cap_rank    integer,
    exchange_listings  text[]  NOT NULL,
    categories         text[]  NOT NULL,
    genesis_date       date,
    primary_ecosystem  jsonb,
    homepage_url       text    NOT NULL,
    description        text
);

-- Derived: live posts per ticker (docs/api.md#post-count), kept exact by the projector.
CREATE TABLE ticker_post_counts (
    ticker      text    PRIMARY KEY,
    post_count  integer NOT NULL CHECK (post_count >= 0)
);

-- Derived: visible posts per minute of published_at and sentiment, for the 24h pulse.
CREATE TABLE sentiment_buckets (
    bucket     timestamptz NOT NULL,
    sentiment  text        NOT NULL,
    count      integer     NOT NULL CHECK (count >= 0),
    PRIMARY KEY (bucket, sentiment)
);

CREATE TABLE workspaces (
    id                       text        PRIMARY KEY,
    version                  bigint      NOT NULL,
    name                     text        NOT NULL,
    status                   text        NOT NULL,
    rate_limit_per_minute    integer,
    daily_quota              integer,
    stream_connection_limit  integer,
    -- Moved only by sweeper ticks (docs/api.md#badge-status): unknown until the first tick sees a heartbeat.
    badge_status             text        NOT NULL DEFAULT 'unknown',
    badge_swept_at           timestamptz
);

CREATE TABLE api_keys (
    id              text        PRIMARY KEY,
    version         bigint      NOT NULL,
    workspace_id    text        NOT NULL,
    key_hash        text        NOT NULL UNIQUE,
    display_prefix  text        NOT NULL,
    issued_at       timestamptz NOT NULL,
    revoked_at      timestamptz
);

CREATE TABLE embeds (
    id            text        PRIMARY KEY,
    version       bigint      NOT NULL,
    workspace_id  text        NOT NULL,
    kind          text        NOT NULL,
    created_at    timestamptz NOT NULL
);

-- The latest heartbeat per embed (its version is the landing time).
CREATE TABLE heartbeats (
    embed_id      text        PRIMARY KEY,
    workspace_id  text        NOT NULL,
    landed_at     timestamptz NOT NULL
);
CREATE INDEX heartbeats_workspace ON heartbeats (workspace_id, landed_at DESC);

-- Monotonic change counters, so readers can invalidate pre-serialized bodies cheaply.
CREATE TABLE change_stamps (
    name   text   PRIMARY KEY,
    stamp  bigint NOT NULL
);
INSERT INTO change_stamps (name, stamp) VALUES ('tokens', 0), ('categories', 0), ('locales', 0), ('access', 0);
