"""The stream protocol (docs/api.md#stream-messages, schemas/asyncapi.json): messages, each encoded once into the bytes of one JSON
text frame, and the close codes the server uses. Documented in schemas/asyncapi.json."""

from __future__ import annotations

from datetime import datetime, timezone

import orjson

from ..readmodel.mapping import iso_utc
from ..readmodel.messages import post_created  # noqa: F401  (the stream's post.created)

#: The server shuts down (SIGTERM): reconnect, possibly to another process.
CLOSE_GOING_AWAY = 1001
#: The connection's slot lease could not be kept (the database was unreachable for longer
#: than the lease lifetime): reconnect after a short back-off.
CLOSE_TRY_AGAIN_LATER = 1013
#: Access changed while connected (key revoked, workspace suspended, badge missing);
#: the close reason is the error code (NOT_AUTHENTICATED, WORKSPACE_SUSPENDED, BADGE_MISSING).
CLOSE_ACCESS_REVOKED = 4003
#: The client did not read its messages fast enough (its queue overflowed).
CLOSE_SLOW_CONSUMER = 4008
#: The server failed to write to this connection for a reason of its own (a defect, logged at
#: ERROR): reconnect and gap-fill.
CLOSE_INTERNAL_ERROR = 1011

SLOW_CONSUMER_REASON = "SLOW_CONSUMER"
GOING_AWAY_REASON = "SERVER_SHUTTING_DOWN"
LEASE_LOST_REASON = "STREAM_LEASE_LOST"
INTERNAL_ERROR_REASON = "INTERNAL_ERROR"
#: A resume's replay could not read the read model: reconnect with the same cursor (1013).
RESUME_FAILED_REASON = "RESUME_FAILED"

#: Error code of the HTTP 429 refusing a handshake beyond the workspace's connection limit.
STREAM_LIMIT_REACHED = "STREAM_LIMIT_REACHED"


def _now() -> str:
    return iso_utc(datetime.now(timezone.utc))


def ready(
    session_id: str, cursor: str | None = None, resumed: bool | None = None, reason: tuple[str, str] | None = None
) -> bytes:
    """The ``ready`` message (schemas/asyncapi.json); with cursors opted in, also ``cursor`` (where this connection starts)
    and, when asked to resume, ``resumed`` and (when false) ``reason`` {code, message}."""
    message: dict[str, object] = {"type": "ready", "ts": _now(), "session_id": session_id}
    if cursor is not None:
        message["cursor"] = cursor
    if resumed is not None:
        message["resumed"] = resumed
    if reason is not None:
        message["reason"] = {"code": reason[0], "message": reason[1]}
    return orjson.dumps(message)


def ping() -> bytes:
    return orjson.dumps({"type": "ping", "ts": _now()})
