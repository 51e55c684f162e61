"""Admin commands ``tickerwire workspace | key | embed | heartbeat``: build the next snapshot of
a workspace, key, embed or heartbeat, and publish it.

Snapshots need the entity's current state, which is read (never written) from the read
model; the new version is ``max(stored + 1, now in microseconds)`` so it always wins.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

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
from ..readmodel.snapshots import AdminError, BadArgument, next_version, now, require_workspace
from . import argtypes
from .running import cli_config, publish_one, read_conn, run_admin

__all__ = ["AdminError", "BadArgument", "next_version", "now", "require_workspace"]


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


# --------------------------------------------------------------------------- the commands


def cmd_workspace(args: argparse.Namespace) -> int:
    async def go() -> int:
        config = cli_config()
        async with read_conn(config) as conn:
            event = await workspace_event(
                conn,
                args.id,
                name=getattr(args, "name", None),
                status={"create": "active", "suspend": "suspended", "reinstate": "active", "update": None}[args.action],
                rate_limit_per_minute=getattr(args, "rate_limit", None),
                daily_quota=getattr(args, "daily_quota", None),
                stream_connection_limit=getattr(args, "stream_connections", None),
                create=args.action == "create",
            )
        await publish_one(config, event)
        print(f"workspace {args.id}: {event.data.status} (version {event.version})")
        return 0

    return run_admin("workspace", go())


def cmd_key(args: argparse.Namespace) -> int:
    async def go() -> int:
        config = cli_config()
        if args.action == "issue":
            async with read_conn(config) as conn:
                await require_workspace(conn, args.workspace)
            key, event = issue_key(args.workspace, args.id)
            await publish_one(config, event)
            print(f"key id: {event.data.id}", file=sys.stderr)
            print(key)  # shown once; only its hash is stored
            return 0
        async with read_conn(config) as conn:
            event = await revoke_key_event(conn, args.id)
        await publish_one(config, event)
        print(f"key {args.id} revoked")
        return 0

    return run_admin("key", go())


def cmd_embed(args: argparse.Namespace) -> int:
    async def go() -> int:
        event = embed_event(args.id, args.workspace, args.kind)  # validates the ids first
        config = cli_config()
        async with read_conn(config) as conn:
            await require_workspace(conn, args.workspace)
        await publish_one(config, event)
        print(f"embed {args.id} created for {args.workspace}")
        return 0

    return run_admin("embed", go())


def cmd_heartbeat(args: argparse.Namespace) -> int:
    async def go() -> int:
        event = heartbeat_event(args.embed, args.workspace, args.landed_at)  # validates, refuses the future
        config = cli_config()
        async with read_conn(config) as conn:
            await require_embed(conn, args.embed, args.workspace)
        await publish_one(config, event)
        print(f"heartbeat for {args.embed} landed at {event.data.landed_at.isoformat()}")
        return 0

    return run_admin("heartbeat", go())


def register(sub) -> None:
    ws = sub.add_parser("workspace", help="create, suspend, reinstate or update a workspace")
    ws.add_argument("action", choices=["create", "suspend", "reinstate", "update"], help="what to do")
    ws.add_argument("id", type=argtypes.entity_id, help="workspace id (letters, digits, _ and -)")
    ws.add_argument("--name", help="display name (default: the id, or the current name)")
    ws.add_argument(
        "--rate-limit", type=argtypes.bounded_int(1, 1_000_000), help="requests per minute, 1..1000000 (default 60)"
    )
    ws.add_argument(
        "--daily-quota",
        type=argtypes.bounded_int(1, 1_000_000_000),
        help="requests per UTC day, 1..1000000000 (default 5000)",
    )
    ws.add_argument(
        "--stream-connections",
        type=argtypes.bounded_int(1, 10_000),
        help="concurrent stream connections, 1..10000 (default 5)",
    )
    ws.set_defaults(func=cmd_workspace)

    key = sub.add_parser("key", help="issue or revoke an API key")
    key_sub = key.add_subparsers(dest="action", required=True, metavar="ACTION")
    issue = key_sub.add_parser("issue", help="issue a key for an existing workspace (printed once on stdout)")
    issue.add_argument("workspace", type=argtypes.entity_id, help="id of a workspace the read model already shows")
    issue.add_argument("--id", type=argtypes.entity_id, help="key id (default derived from the key hash)")
    revoke = key_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id", type=argtypes.entity_id, help="key id, as printed by `key issue`")
    key.set_defaults(func=cmd_key)

    emb = sub.add_parser("embed", help="register an embed (badge or widget) for an existing workspace")
    emb.add_argument("id", type=argtypes.embed_id, help="embed id: bdg_ then 4 to 64 letters or digits")
    emb.add_argument("workspace", type=argtypes.entity_id, help="id of a workspace the read model already shows")
    emb.add_argument("--kind", choices=["badge", "widget"], default="badge", help="what is embedded (default badge)")
    emb.set_defaults(func=cmd_embed)

    hb = sub.add_parser("heartbeat", help="record a badge heartbeat of an existing embed")
    hb.add_argument("embed", type=argtypes.embed_id, help="embed id, bdg_<id>, registered for the workspace")
    hb.add_argument("workspace", type=argtypes.entity_id, help="the embed's workspace id")
    hb.add_argument(
        "--landed-at",
        type=argtypes.aware_timestamp,
        help="when the ping landed (ISO 8601 with offset, not in the future); default now",
    )
    hb.set_defaults(func=cmd_heartbeat)
