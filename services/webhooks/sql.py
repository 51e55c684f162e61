"""The dispatcher's statements. ``webhook_endpoints`` is the read model's (the access topic's
endpoints); ``webhook_deliveries`` and ``webhook_attempts`` are platform tables only the
dispatcher holding an endpoint's lease writes (services/readmodel/migrations/platform/0004_webhooks.sql).

Every write of an endpoint's progress is guarded by its lease (``lease_owner`` is this process
and the lease has not expired): a dispatcher that lost the lease writes nothing, and the next
holder redelivers from the cursor stored last, with the same ``webhook-id``.
"""

from __future__ import annotations

#: Every endpoint not removed, with the dispatcher's state of it.
SELECT_ENDPOINTS = """
SELECT e.id, e.version, e.workspace_id, e.url, e.locales, e.tickers, e.categories, e.status,
       e.secret_generation, e.rotated_at, e.start_cursor, e.replay_from, e.replay_seq,
       d.state, d.disabled_version, d.lease_owner, COALESCE(d.lease_until > now(), false) AS leased
FROM webhook_endpoints e LEFT JOIN webhook_deliveries d ON d.endpoint_id = e.id
WHERE e.status <> 'removed'
"""

#: Take the lease of these endpoints where nobody holds it (a new endpoint's progress starts at
#: its registration cursor); returns the progress of those taken.
CLAIM = """
INSERT INTO webhook_deliveries AS d (endpoint_id, cursor, lease_owner, lease_until)
SELECT e.id, e.start_cursor, $1, now() + make_interval(secs => $3)
FROM webhook_endpoints e WHERE e.id = ANY($2::text[])
ON CONFLICT (endpoint_id) DO UPDATE SET lease_owner = EXCLUDED.lease_owner, lease_until = EXCLUDED.lease_until
WHERE d.lease_until IS NULL OR d.lease_until < now() OR d.lease_owner = EXCLUDED.lease_owner
RETURNING d.endpoint_id, d.cursor, d.replay_seq, d.state, d.disabled_version, d.attempt,
          extract(epoch FROM now() - d.failing_since) AS failing_for_s,
          GREATEST(extract(epoch FROM d.next_attempt_at - now()), 0) AS retry_in_s
"""

#: Renew this process's leases; returns the endpoints still held.
RENEW = """
UPDATE webhook_deliveries SET lease_until = now() + make_interval(secs => $3)
WHERE lease_owner = $1 AND endpoint_id = ANY($2::text[]) AND lease_until > now()
RETURNING endpoint_id
"""

RELEASE = """
UPDATE webhook_deliveries SET lease_owner = NULL, lease_until = NULL
WHERE lease_owner = $1 AND endpoint_id = ANY($2::text[])
"""

_HELD = "endpoint_id = $1 AND lease_owner = $2 AND lease_until > now()"

#: The endpoint acknowledged the message: its cursor moves past it, with the attempt row.
DELIVERED = f"""
UPDATE webhook_deliveries SET cursor = $3, delivered = delivered + 1, attempt = 0, failing_since = NULL,
       next_attempt_at = NULL, head_id = NULL, last_delivered_at = now(), updated_at = now()
WHERE {_HELD}
"""

#: An attempt failed: it is tried again after ``$4`` seconds. Returns how long it has been failing.
FAILED = f"""
UPDATE webhook_deliveries SET attempt = $3, failing_since = COALESCE(failing_since, now()),
       next_attempt_at = now() + make_interval(secs => $4), head_id = $5, updated_at = now()
WHERE {_HELD}
RETURNING extract(epoch FROM now() - failing_since) AS failing_for_s
"""

#: Disabled (410, or failing too long, or a cursor that cannot be walked): the cursor stays, the lease goes.
DISABLE = f"""
UPDATE webhook_deliveries SET state = 'disabled', disabled_reason = $3, disabled_at = now(),
       disabled_version = $4, next_attempt_at = NULL, lease_owner = NULL, lease_until = NULL, updated_at = now()
WHERE {_HELD}
"""

#: An operator resumed a disabled endpoint (a later version, active): deliveries go on from its cursor.
ENABLE = f"""
UPDATE webhook_deliveries SET state = 'active', disabled_reason = NULL, disabled_at = NULL, disabled_version = NULL,
       attempt = 0, failing_since = NULL, next_attempt_at = NULL, head_id = NULL, updated_at = now()
WHERE {_HELD}
"""

#: An operator asked for a replay: deliveries go on from its cursor.
REPLAY = f"""
UPDATE webhook_deliveries SET cursor = $3, replay_seq = $4, attempt = 0, failing_since = NULL,
       next_attempt_at = NULL, head_id = NULL, updated_at = now()
WHERE {_HELD}
"""

INSERT_ATTEMPT = """
INSERT INTO webhook_attempts (endpoint_id, webhook_id, attempt, attempted_at, outcome, status, latency_ms, error,
                              next_attempt_at, type, response_excerpt)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
"""

#: A message's body (docs/webhooks.md#one-id-one-body): the one stored at its first attempt, or
#: ``$3`` stored now when there is none. (The second branch reads the snapshot from before the
#: statement, so exactly one branch answers.)
MESSAGE_BODY = """
WITH stored AS (
    INSERT INTO webhook_messages (endpoint_id, webhook_id, body) VALUES ($1, $2, $3)
    ON CONFLICT (endpoint_id, webhook_id) DO NOTHING
    RETURNING body
)
SELECT body FROM stored
UNION ALL
SELECT body FROM webhook_messages WHERE endpoint_id = $1 AND webhook_id = $2
LIMIT 1
"""

#: Bodies stored longer ago than ``$1`` seconds, except each endpoint's head (a message being
#: retried keeps its body until it is acknowledged), at most ``$2`` per call.
PRUNE_MESSAGES = """
DELETE FROM webhook_messages m
WHERE (m.endpoint_id, m.webhook_id) IN (
    SELECT o.endpoint_id, o.webhook_id FROM webhook_messages o
    WHERE o.created_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                      WHERE d.endpoint_id = o.endpoint_id AND d.head_id = o.webhook_id)
    LIMIT $2)
"""
#: Bodies pruned per statement.
PRUNE_MESSAGES_BATCH = 1_000

#: Keep the latest :data:`KEPT_ATTEMPTS` attempts of an endpoint.
KEPT_ATTEMPTS = 100
PRUNE_ATTEMPTS = f"""
DELETE FROM webhook_attempts
WHERE endpoint_id = $1 AND id < (
    SELECT id FROM webhook_attempts WHERE endpoint_id = $1 ORDER BY id DESC OFFSET {KEPT_ATTEMPTS - 1} LIMIT 1)
"""

#: The test events waiting to be sent to these endpoints (services/readmodel/webhook_tests.py).
PENDING_TESTS = """
SELECT endpoint_id, n FROM webhook_tests WHERE sent_at IS NULL AND endpoint_id = ANY($1::text[]) ORDER BY endpoint_id, n
"""

#: A test event was sent (whatever the answer: it is not retried), with its attempt row.
TEST_SENT = f"""
UPDATE webhook_tests SET sent_at = now()
WHERE endpoint_id = $1 AND n = $3 AND EXISTS (SELECT 1 FROM webhook_deliveries WHERE {_HELD})
"""

#: Sent test events older than ``$1`` seconds, except each endpoint's last (it numbers the next).
PRUNE_TESTS = """
DELETE FROM webhook_tests t
WHERE t.sent_at < now() - make_interval(secs => $1)
  AND t.n < (SELECT max(l.n) FROM webhook_tests l WHERE l.endpoint_id = t.endpoint_id)
"""
