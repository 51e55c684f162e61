-- Platform state owned by the serving processes (not part of the rebuildable read model).

-- Requests admitted per workspace and minute / UTC day; the database clock is the only clock.
CREATE TABLE usage_minute (
    workspace_id  text        NOT NULL,
    minute        timestamptz NOT NULL,
    count         integer     NOT NULL,
    PRIMARY KEY (workspace_id, minute)
);

CREATE TABLE usage_day (
    workspace_id  text    NOT NULL,
    day           date    NOT NULL,
    count         integer NOT NULL,
    PRIMARY KEY (workspace_id, day)
);

-- Stream connection slots: leases that their holder renews, freed when they expire.
CREATE TABLE stream_leases (
    session_id    text        PRIMARY KEY,
    workspace_id  text        NOT NULL,
    holder        text        NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX stream_leases_workspace ON stream_leases (workspace_id, expires_at);
