-- Webhook deliveries (docs/webhooks.md): the dispatcher's progress per endpoint, written only by
-- the dispatcher that holds the endpoint's lease.
--
-- `cursor` is the resume cursor after the last message the endpoint acknowledged (a 2xx); it
-- moves in the same transaction as the attempt row that acknowledged it, so a dispatcher killed
-- at any instant resumes where the endpoint is. `attempt`, `failing_since`, `next_attempt_at`
-- and `head_id` describe the message at the head while it is being retried. A disabled endpoint
-- keeps its cursor: `disabled_version` is the endpoint's version when it was disabled, and any
-- later version with status 'active' (an operator's resume) enables it again from that cursor.
CREATE TABLE webhook_deliveries (
    endpoint_id       text        PRIMARY KEY,
    cursor            text,
    delivered         bigint      NOT NULL DEFAULT 0,
    replay_seq        integer     NOT NULL DEFAULT 0,
    state             text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
    disabled_reason   text,
    disabled_at       timestamptz,
    disabled_version  bigint,
    failing_since     timestamptz,
    attempt           integer     NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    head_id           text,
    last_delivered_at timestamptz,
    lease_owner       text,
    lease_until       timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Every attempt, newest last; the dispatcher keeps the latest 100 per endpoint.
CREATE TABLE webhook_attempts (
    id               bigserial   PRIMARY KEY,
    endpoint_id      text        NOT NULL,
    webhook_id       text        NOT NULL,
    attempt          integer     NOT NULL,
    attempted_at     timestamptz NOT NULL,
    -- delivered (2xx), failed (retried), gone (410: endpoint disabled), refused (target not allowed)
    outcome          text        NOT NULL,
    status           integer,
    latency_ms       double precision,
    error            text,
    next_attempt_at  timestamptz
);
CREATE INDEX webhook_attempts_recent ON webhook_attempts (endpoint_id, id DESC);
