-- The partner's note on a webhook endpoint (the event's optional `description`, docs/webhooks.md):
-- "" for every endpoint projected before it.
ALTER TABLE webhook_endpoints ADD COLUMN description text NOT NULL DEFAULT '';
