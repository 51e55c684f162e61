-- One webhook-id, one body (docs/webhooks.md#one-id-one-body): the bytes of a message as its
-- first attempt sent them, per endpoint (a message's `cursor` is the endpoint's own: it depends
-- on the endpoint's filters and where its walk started), sent again byte for byte by every
-- later attempt and every replay. Written by the dispatcher holding the endpoint's lease,
-- committed before the first attempt. Kept for the dispatcher's retention
-- (TICKERWIRE_WEBHOOKS_MESSAGE_RETENTION_S) after that attempt, and longer while the message is
-- the endpoint's head (being retried).
CREATE TABLE webhook_messages (
    endpoint_id  text        NOT NULL,
    webhook_id   text        NOT NULL,
    body         bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, webhook_id)
);
CREATE INDEX webhook_messages_age ON webhook_messages (created_at);

-- The attempt log says what the message was and what the receiver answered: `type`
-- (post.created or webhook.test) and `response_excerpt` (at most the first 1024 bytes of the
-- answer's body, decoded as UTF-8 with replacement; NULL when no answer came).
ALTER TABLE webhook_attempts
    ADD COLUMN type text NOT NULL DEFAULT 'post.created' CHECK (type IN ('post.created', 'webhook.test')),
    ADD COLUMN response_excerpt text;

-- Test events (docs/webhooks.md#test-events): a partner's or an operator's request, numbered per
-- endpoint when it is made (its webhook-id is msg_test_<endpoint>_<n>), sent once by the
-- dispatcher holding the endpoint's lease, out of band (the endpoint's cursor does not move).
CREATE TABLE webhook_tests (
    endpoint_id  text        NOT NULL,
    n            integer     NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz,
    PRIMARY KEY (endpoint_id, n)
);
CREATE INDEX webhook_tests_pending ON webhook_tests (endpoint_id, n) WHERE sent_at IS NULL;
