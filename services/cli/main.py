"""The ``tickerwire`` console script: services, publisher, admin commands and ``up``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from datetime import datetime
from pathlib import Path

from ..common.config import Config, ConfigError, describe
from ..common.errors import TickerwireError
from ..common.logs import setup_logging

log = logging.getLogger("tickerwire.cli")


def _config() -> Config:
    """Settings from the environment; falls back to a running ``tickerwire up``'s state file."""
    env = dict(os.environ)
    state = Path(env.get("TICKERWIRE_STATE_DIR", ".tickerwire")) / "up.json"
    if state.exists():
        import orjson

        info = orjson.loads(state.read_bytes())
        for var, key, default in (
            ("TICKERWIRE_DATABASE_URL", "database_url", ""),
            ("TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS", "kafka_bootstrap_servers", ""),
            ("TICKERWIRE_TOPIC_PREFIX", "topic_prefix", "tickerwire"),
        ):
            if var not in env and var + "_FILE" not in env:
                env[var] = info.get(key, default)
    return Config.from_env(env)


def _service(name: str):
    def run(args: argparse.Namespace) -> int:
        from ..common.process import run_service

        if name == "projector":
            if getattr(args, "action", None) == "rebuild":
                from ..projector.rebuild import rebuild_main

                return rebuild_main(_config())
            from ..projector.app import serve
        elif name == "api":
            from ..api.app import serve
        else:
            from ..stream.app import serve
        return run_service(name, serve, _config())

    return run


def _run(coro) -> int:
    setup_logging("cli", os.environ.get("TICKERWIRE_LOG_LEVEL", "WARNING"))
    try:
        result = asyncio.run(coro)
    except (TickerwireError, ConfigError) as exc:
        print(f"tickerwire: {exc}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


async def _read_conn(config: Config):
    import asyncpg

    return await asyncpg.connect(
        config.database_url, server_settings={"search_path": f"{config.read_model_schema},public"}
    )


async def _snapshot(config: Config, build, what: str):
    """Build the next snapshot of an entity from its current read-model row; None if refused."""
    from .admin import AdminError

    conn = await _read_conn(config)
    try:
        return await build(conn)
    except AdminError as exc:
        print(f"tickerwire {what}: {exc}", file=sys.stderr)
        return None
    finally:
        await conn.close()


def cmd_publish(args: argparse.Namespace) -> int:
    from .publish import parse_lines, publish, read_source

    try:
        lines = read_source(args.file, sys.stdin)
    except OSError as exc:
        print(f"tickerwire publish: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    events, errors = parse_lines(lines)
    if errors:
        for err in errors:
            print(f"{args.file}:{err.line}: {err.reason}", file=sys.stderr)
        print(f"tickerwire publish: {len(errors)} invalid event(s); nothing was published", file=sys.stderr)
        return 1
    rc = _run(publish(_config(), events))
    if rc == 0:
        print(f"published {len(events)} event(s)")
    return rc


async def _publish_one(config: Config, event) -> None:
    from .publish import publish

    await publish(config, [event])


def cmd_workspace(args: argparse.Namespace) -> int:
    from .admin import workspace_event

    async def go() -> int:
        config = _config()
        event = await _snapshot(
            config,
            lambda conn: workspace_event(
                conn,
                args.id,
                name=getattr(args, "name", None),
                status={"create": "active", "suspend": "suspended", "reinstate": "active", "update": None}[args.action],
                rate_limit_per_minute=getattr(args, "rate_limit", None),
                daily_quota=getattr(args, "daily_quota", None),
                stream_connection_limit=getattr(args, "stream_connections", None),
                create=args.action == "create",
            ),
            "workspace",
        )
        if event is None:
            return 1
        await _publish_one(config, event)
        print(f"workspace {args.id}: {event.data.status} (version {event.version})")
        return 0

    return _run(go())


def cmd_key(args: argparse.Namespace) -> int:
    from .admin import issue_key, revoke_key_event

    async def go() -> int:
        config = _config()
        if args.action == "issue":
            key, event = issue_key(args.workspace, args.id)
            await _publish_one(config, event)
            print(f"key id: {event.data.id}", file=sys.stderr)
            print(key)  # shown once; only its hash is stored
            return 0
        event = await _snapshot(config, lambda conn: revoke_key_event(conn, args.id), "key")
        if event is None:
            return 1
        await _publish_one(config, event)
        print(f"key {args.id} revoked")
        return 0

    return _run(go())


def cmd_embed(args: argparse.Namespace) -> int:
    from .admin import embed_event

    event = embed_event(args.id, args.workspace, args.kind)
    rc = _run(_publish_one(_config(), event))
    if rc == 0:
        print(f"embed {args.id} created for {args.workspace}")
    return rc


def cmd_heartbeat(args: argparse.Namespace) -> int:
    from .admin import heartbeat_event

    landed = datetime.fromisoformat(args.landed_at.replace("Z", "+00:00")) if args.landed_at else None
    if landed is not None and landed.tzinfo is None:
        print("tickerwire heartbeat: --landed-at needs a UTC offset (e.g. 2026-01-01T00:00:00Z)", file=sys.stderr)
        return 2
    event = heartbeat_event(args.embed, args.workspace, landed)
    rc = _run(_publish_one(_config(), event))
    if rc == 0:
        print(f"heartbeat for {args.embed} landed at {event.data.landed_at.isoformat()}")
    return rc


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..projector.sweeper import sweep_once

    async def go() -> int:
        conn = await _read_conn(_config())
        try:
            statuses = await sweep_once(conn)
        finally:
            await conn.close()
        for ws, status in sorted(statuses.items()):
            print(f"{ws}\t{status}")
        return 0

    return _run(go())


def cmd_migrate(args: argparse.Namespace) -> int:
    from ..common.db import connect, migrate

    async def go() -> int:
        config = _config()
        async with connect(config.database_url) as conn:
            applied = await migrate(conn, config.read_model_schema)
        print("\n".join(applied) or "up to date")
        return 0

    return _run(go())


def cmd_topics(args: argparse.Namespace) -> int:
    from ..common import kafka

    async def go() -> int:
        config = _config()
        if args.action == "ensure":
            for name in await kafka.ensure_topics(config):
                print(f"created {name}")
        differences = await kafka.check_topics(config)
        for diff in differences:
            print(diff)
        if differences:
            print(f"tickerwire topics {args.action}: {len(differences)} difference(s) from the declaration", file=sys.stderr)
            return 1
        print("topics match the declaration")
        return 0

    return _run(go())


def cmd_up(args: argparse.Namespace) -> int:
    from .up import up_main

    return up_main(args)


def cmd_config(args: argparse.Namespace) -> int:
    for var, default in describe():
        print(f"{var}\t{default}")
    return 0


def cmd_schemas(args: argparse.Namespace) -> int:
    from tickerwire.schemas.export import export_all

    for path in export_all(Path(args.out) if args.out else None):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tickerwire", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    proj = sub.add_parser("projector", help="run the projector (the only writer of the read model)")
    proj.add_argument("action", nargs="?", choices=["run", "rebuild"], default="run")
    proj.set_defaults(func=_service("projector"))
    sub.add_parser("api", help="run the read API").set_defaults(func=_service("api"))
    sub.add_parser("stream", help="run the WebSocket stream").set_defaults(func=_service("stream"))

    pub = sub.add_parser("publish", help="validate JSON-lines events and publish them (all or nothing)")
    pub.add_argument("file", help="a JSON-lines file, or - for standard input")
    pub.set_defaults(func=cmd_publish)

    ws = sub.add_parser("workspace", help="create, suspend, reinstate or update a workspace")
    ws.add_argument("action", choices=["create", "suspend", "reinstate", "update"])
    ws.add_argument("id")
    ws.add_argument("--name")
    ws.add_argument("--rate-limit", type=int, help="requests per minute (default 60)")
    ws.add_argument("--daily-quota", type=int, help="requests per UTC day (default 5000)")
    ws.add_argument("--stream-connections", type=int, help="concurrent stream connections (default 5)")
    ws.set_defaults(func=cmd_workspace)

    key = sub.add_parser("key", help="issue or revoke an API key")
    key_sub = key.add_subparsers(dest="action", required=True)
    issue = key_sub.add_parser("issue", help="issue a key (printed once on stdout)")
    issue.add_argument("workspace")
    issue.add_argument("--id", help="key id (default derived from the key hash)")
    revoke = key_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id")
    key.set_defaults(func=cmd_key)

    emb = sub.add_parser("embed", help="register an embed (badge or widget) for a workspace")
    emb.add_argument("id", help="embed id, bdg_<id>")
    emb.add_argument("workspace")
    emb.add_argument("--kind", choices=["badge", "widget"], default="badge")
    emb.set_defaults(func=cmd_embed)

    hb = sub.add_parser("heartbeat", help="record a badge heartbeat")
    hb.add_argument("embed", help="embed id, bdg_<id>")
    hb.add_argument("workspace")
    hb.add_argument("--landed-at", help="when the ping landed (ISO 8601 with offset); default now")
    hb.set_defaults(func=cmd_heartbeat)

    sub.add_parser("sweep", help="run one badge-sweeper tick now").set_defaults(func=cmd_sweep)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=cmd_migrate)
    top = sub.add_parser("topics", help="create the declared topics, or compare a cluster's topics with the declaration")
    top.add_argument(
        "action",
        choices=["ensure", "check"],
        help="ensure: create missing topics, then check; check: list each difference, exit 1 if any",
    )
    top.set_defaults(func=cmd_topics)
    sub.add_parser("config", help="list the settings (environment variables) and defaults").set_defaults(func=cmd_config)

    sch = sub.add_parser("schemas", help="write the JSON Schema files of the event contract")
    sch.add_argument("action", choices=["export"])
    sch.add_argument("--out", help="folder (default: the package's schemas/events)")
    sch.set_defaults(func=cmd_schemas)

    up = sub.add_parser("up", help="start the whole system (embedded PostgreSQL and broker unless configured)")
    up.add_argument("--state-dir", default=os.environ.get("TICKERWIRE_STATE_DIR", ".tickerwire"))
    up.add_argument("--database-url", default=os.environ.get("TICKERWIRE_DATABASE_URL"))
    up.add_argument("--kafka", dest="kafka_bootstrap_servers", default=os.environ.get("TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS"))
    up.add_argument("--api-port", type=int, default=int(os.environ.get("TICKERWIRE_API_PORT", 8080)))
    up.add_argument("--stream-port", type=int, default=int(os.environ.get("TICKERWIRE_STREAM_PORT", 8081)))
    up.add_argument("--projector-port", type=int, default=int(os.environ.get("TICKERWIRE_PROJECTOR_PORT", 8082)))
    up.add_argument("--posts", type=int, default=2000, help="demo posts to publish (default 2000)")
    up.add_argument("--tokens", type=int, default=3000, help="demo tokens to publish (default 3000)")
    up.add_argument("--no-demo", action="store_true", help="publish no demo dataset")
    up.add_argument("--no-trickle", action="store_true", help="do not publish a new demo post every few seconds")
    up.add_argument("--trickle-interval", type=float, default=5.0, help="seconds between live demo posts (default 5)")
    up.set_defaults(func=cmd_up)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"tickerwire: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
