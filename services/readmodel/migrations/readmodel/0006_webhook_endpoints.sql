-- Webhook endpoints (docs/webhooks.md): the access topic's `webhook_endpoint` events, latest
-- version per id. The dispatcher's progress per endpoint is platform state
-- (public.webhook_deliveries), which a rebuild of the read model never touches.
CREATE TABLE webhook_endpoints (
    id                 text        PRIMARY KEY,
    version            bigint      NOT NULL,
    workspace_id       text        NOT NULL,
    url                text        NOT NULL,
    locales            text[],
    tickers            text[],
    categories         text[],
    status             text        NOT NULL,
    secret_generation  integer     NOT NULL,
    rotated_at         timestamptz,
    start_cursor       text,
    replay_from        text,
    replay_seq         integer     NOT NULL,
    created_at         timestamptz NOT NULL
);
CREATE INDEX webhook_endpoints_workspace ON webhook_endpoints (workspace_id, id);
INSERT INTO change_stamps (name, stamp) VALUES ('webhooks', 0);
