-- Webhook endpoint creations in flight (docs/webhooks.md#the-cap-and-idempotency), written by
-- services/readmodel/endpoint_cap.py under a per-workspace transaction lock
-- (pg_advisory_xact_lock), by the API and by `tickerwire webhooks register` alike.
--
-- webhook_reservations: an endpoint id a create has counted against its workspace's cap and
-- published (or is publishing), until the read model shows it. It counts while the read model does
-- not show the endpoint and it is younger than the reservation's lifetime (15 minutes): a create
-- whose publish failed, or a process killed between reserving and publishing, lowers the cap for
-- at most that long, never for good. `event` is the snapshot published (never a secret), so a
-- create retried with the same Idempotency-Key publishes the same endpoint id and version again.
CREATE TABLE webhook_reservations (
    endpoint_id   text        PRIMARY KEY,
    workspace_id  text        NOT NULL,
    event         jsonb       NOT NULL,
    reserved_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_reservations_workspace ON webhook_reservations (workspace_id, reserved_at);

-- webhook_idempotency: the Idempotency-Key of a create, per workspace, kept 24 hours: the sha256
-- of the request it came with, the endpoint id it created and, once answered, the response
-- without its secret (which is derived again when the response is repeated, never stored).
CREATE TABLE webhook_idempotency (
    workspace_id  text        NOT NULL,
    key           text        NOT NULL,
    request_sha   bytea       NOT NULL,
    endpoint_id   text        NOT NULL,
    response      jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, key)
);
CREATE INDEX webhook_idempotency_age ON webhook_idempotency (created_at);
