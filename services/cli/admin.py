"""Admin commands: build the next snapshot of a workspace, key, embed or heartbeat.

Snapshots need the entity's current state, which is read (never written) from the read
model; the new version is ``max(stored + 1, now in microseconds)`` so it always wins.
"""

from __future__ import annotations

from datetime import datetime, timezone

import asyncpg

from tickerwire.schemas.models import (
    ApiKey,
    ApiKeyEvent,
    Embed,
    EmbedEvent,
    EmbedKind,
    Heartbeat,
    HeartbeatEvent,
    Workspace,
    WorkspaceEvent,
    WorkspaceStatus,
)

from ..common.http.keys import display_prefix, generate_key, hash_key


class AdminError(Exception):
    """A command that cannot be carried out as asked (unknown id, wrong state)."""


class BadArgument(AdminError):
    """An argument no state of the read model could make valid (e.g. a future timestamp)."""


def now() -> datetime:
    return datetime.now(timezone.utc)


def next_version(stored: int | None) -> int:
    return max((stored or 0) + 1, int(now().timestamp() * 1_000_000))


async def _row(conn: asyncpg.Connection, table: str, id_: str) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT * FROM {table} WHERE id = $1", id_)


async def workspace_event(
    conn: asyncpg.Connection,
    workspace_id: str,
    *,
    name: str | None = None,
    status: WorkspaceStatus | None = None,
    rate_limit_per_minute: int | None = None,
    daily_quota: int | None = None,
    stream_connection_limit: int | None = None,
    create: bool = False,
) -> WorkspaceEvent:
    row = await _row(conn, "workspaces", workspace_id)
    if create and row is not None:
        raise AdminError(f"workspace {workspace_id} already exists")
    if not create and row is None:
        raise AdminError(f"no workspace {workspace_id}")
    current = dict(row) if row else {}
    data = Workspace(
        id=workspace_id,
        name=name or current.get("name") or workspace_id,
        status=status or current.get("status") or "active",
        rate_limit_per_minute=rate_limit_per_minute
        if rate_limit_per_minute is not None
        else current.get("rate_limit_per_minute"),
        daily_quota=daily_quota if daily_quota is not None else current.get("daily_quota"),
        stream_connection_limit=stream_connection_limit
        if stream_connection_limit is not None
        else current.get("stream_connection_limit"),
    )
    return WorkspaceEvent(version=next_version(current.get("version")), emitted_at=now(), data=data)


def issue_key(workspace_id: str, key_id: str | None = None) -> tuple[str, ApiKeyEvent]:
    """A new key and the event that registers its hash. The key itself is never published."""
    key = generate_key()
    at = now()
    data = ApiKey(
        id=key_id or "key_" + hash_key(key)[:16],
        workspace_id=workspace_id,
        key_hash=hash_key(key),
        display_prefix=display_prefix(key),
        issued_at=at,
    )
    return key, ApiKeyEvent(version=next_version(None), emitted_at=at, data=data)


async def revoke_key_event(conn: asyncpg.Connection, key_id: str) -> ApiKeyEvent:
    row = await _row(conn, "api_keys", key_id)
    if row is None:
        raise AdminError(f"no key {key_id}")
    data = ApiKey(
        id=row["id"],
        workspace_id=row["workspace_id"],
        key_hash=row["key_hash"],
        display_prefix=row["display_prefix"],
        issued_at=row["issued_at"],
        revoked_at=row["revoked_at"] or now(),
    )
    return ApiKeyEvent(version=next_version(row["version"]), emitted_at=now(), data=data)


async def require_workspace(conn: asyncpg.Connection, workspace_id: str) -> None:
    """Refuse a workspace the read model does not show (read only: nothing is written)."""
    if await _row(conn, "workspaces", workspace_id) is None:
        raise AdminError(
            f"no workspace {workspace_id} in the read model; create it with "
            f"`tickerwire workspace create {workspace_id}` and wait until it is projected"
        )


async def require_embed(conn: asyncpg.Connection, embed_id: str, workspace_id: str) -> None:
    """Refuse an embed the read model does not show for this workspace."""
    row = await _row(conn, "embeds", embed_id)
    if row is None:
        raise AdminError(
            f"no embed {embed_id} in the read model; register it with `tickerwire embed {embed_id} {workspace_id}`"
        )
    if row["workspace_id"] != workspace_id:
        raise AdminError(f"embed {embed_id} belongs to workspace {row['workspace_id']}, not {workspace_id}")


def embed_event(embed_id: str, workspace_id: str, kind: EmbedKind = "badge") -> EmbedEvent:
    at = now()
    return EmbedEvent(
        version=next_version(None),
        emitted_at=at,
        data=Embed(id=embed_id, workspace_id=workspace_id, kind=kind, created_at=at),
    )


def heartbeat_event(embed_id: str, workspace_id: str, landed_at: datetime | None = None) -> HeartbeatEvent:
    landed = landed_at or now()
    if landed > now():
        raise BadArgument(
            f"--landed-at {landed.isoformat()} is in the future; a heartbeat records a ping that has landed"
        )
    return HeartbeatEvent(
        version=max(int(landed.timestamp() * 1000), 1),
        emitted_at=now(),
        data=Heartbeat(embed_id=embed_id, workspace_id=workspace_id, landed_at=landed),
    )
