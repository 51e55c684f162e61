"""What every change of an access entity shares, for the operator commands and the API alike:
its refusals, its version and the workspace check.

A change publishes the entity's next snapshot, built from the current state the read model
shows; its version is ``max(stored + 1, now in microseconds)``, so it always wins.
"""

from __future__ import annotations

from datetime import datetime, timezone

import asyncpg


class AdminError(Exception):
    """A change that cannot be carried out as asked (unknown id, wrong state). ``code`` is the
    error envelope's code the API answers it with (docs/api.md#error-envelope)."""

    code = "INVALID_STATE"

    def __init__(self, message: str, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        #: The request field the API names (None: none; the CLI's option is in the message).
        self.field = field
        if code is not None:
            self.code = code


class BadArgument(AdminError):
    """An argument no state of the read model could make valid (e.g. a future timestamp)."""

    code = "VALIDATION_FAILED"


class NotFound(AdminError):
    """No such entity, or (for a workspace's caller) not one of the caller's workspace."""

    code = "NOT_FOUND"


def now() -> datetime:
    return datetime.now(timezone.utc)


def next_version(stored: int | None) -> int:
    return max((stored or 0) + 1, int(now().timestamp() * 1_000_000))


async def require_workspace(conn: asyncpg.Connection, workspace_id: str) -> None:
    """Refuse a workspace the read model does not show (read only: nothing is written)."""
    if await conn.fetchrow("SELECT 1 FROM workspaces WHERE id = $1", workspace_id) is None:
        raise AdminError(
            f"no workspace {workspace_id} in the read model; create it with "
            f"`tickerwire workspace create {workspace_id}` and wait until it is projected"
        )
