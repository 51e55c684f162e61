"""Test events (docs/webhooks.md#test-events): a partner (``POST /webhooks/endpoints/{id}/test``)
or an operator (``tickerwire webhooks test``) asks for one; it is numbered per endpoint when it
is asked for, stored as pending in ``webhook_tests`` (a platform table: a request, not a part of
the endpoint's configuration), and the dispatcher holding the endpoint's lease sends it once, out
of band: the endpoint's cursor never moves for it.

The request is written here once for both callers; the message's body is
:func:`.messages.webhook_test`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .deliveries import webhook_disabled

#: Test events one endpoint may have waiting to be sent; one more is refused.
MAX_PENDING_TESTS = 10

#: Serialises the requests of one endpoint (its next number), then reads the endpoint and its
#: pending tests. ``$1`` the endpoint, ``$2`` the workspace (NULL: any, an operator's).
_READ = """
SELECT e.workspace_id, e.status, e.version, d.state, d.disabled_version,
       (SELECT count(*) FROM webhook_tests t WHERE t.endpoint_id = e.id AND t.sent_at IS NULL) AS pending,
       (SELECT COALESCE(max(n), 0) FROM webhook_tests t WHERE t.endpoint_id = e.id) AS last_n
FROM webhook_endpoints e LEFT JOIN webhook_deliveries d ON d.endpoint_id = e.id
WHERE e.id = $1 AND e.status <> 'removed' AND ($2::text IS NULL OR e.workspace_id = $2)
"""
_INSERT = "INSERT INTO webhook_tests (endpoint_id, n) VALUES ($1, $2)"


@dataclass(frozen=True, slots=True)
class TestRefused:
    """Why no test event was queued: ``not_found`` (no such endpoint the caller may see) or
    ``invalid_state`` (paused, disabled, or too many waiting), with the message."""

    code: str
    message: str


def test_webhook_id(endpoint_id: str, n: int) -> str:
    """The ``webhook-id`` of an endpoint's ``n``-th test event."""
    return f"msg_test_{endpoint_id}_{n}"


async def request_test(conn: Any, endpoint_id: str, workspace_id: str | None) -> str | TestRefused:
    """Queue a test event for the endpoint (one of ``workspace_id``'s; None: any); its
    ``webhook-id``, or why not. ``conn``: an asyncpg connection to the primary, in no transaction."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('webhook_tests:' || $1))", endpoint_id)
        row = await conn.fetchrow(_READ, endpoint_id, workspace_id)
        if row is None:
            return TestRefused("not_found", f"no webhook endpoint {endpoint_id}")
        if row["status"] != "active":
            return TestRefused("invalid_state", f"the endpoint is {row['status']}: resume it to send a test event")
        if row["state"] is not None and webhook_disabled(row):
            return TestRefused("invalid_state", "the endpoint is disabled: resume it to send a test event")
        if row["pending"] >= MAX_PENDING_TESTS:
            return TestRefused(
                "invalid_state", f"{MAX_PENDING_TESTS} test events are waiting to be sent to the endpoint"
            )
        n = row["last_n"] + 1
        await conn.execute(_INSERT, endpoint_id, n)
    return test_webhook_id(endpoint_id, n)
