"""The ``tickerwire`` console script: services, publisher, admin commands and ``up``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from ..common.runtime.config import STATE_DIR_DEFAULT, ConfigError, setting
from ..common.runtime.logs import setup_logging
from .settings import FullConfig, settings_table


def _config() -> FullConfig:
    """Every service's settings from the environment (:mod:`.settings`); falls back to a running ``tickerwire up``'s state file."""
    env = dict(os.environ)
    state = Path(setting("STATE_DIR", STATE_DIR_DEFAULT, env) or STATE_DIR_DEFAULT) / "up.json"
    if state.exists():
        import orjson

        try:
            info = orjson.loads(state.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read {state}: {exc}; remove it if no `tickerwire up` is running") from None
        for var, key, default in (
            ("TICKERWIRE_DATABASE_URL", "database_url", ""),
            ("TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS", "kafka_bootstrap_servers", ""),
            ("TICKERWIRE_TOPIC_PREFIX", "topic_prefix", "tickerwire"),
        ):
            if var not in env and var + "_FILE" not in env:
                env[var] = info.get(key, default)
        # `up`'s dispatcher: its signing key (a file, like any secret) and its address policy.
        if info.get("webhooks_signing_key_file") and not any(
            v in env for v in ("TICKERWIRE_WEBHOOKS_SIGNING_KEY", "TICKERWIRE_WEBHOOKS_SIGNING_KEY_FILE")
        ):
            env["TICKERWIRE_WEBHOOKS_SIGNING_KEY_FILE"] = info["webhooks_signing_key_file"]
        if info.get("webhooks_allow_private_targets"):
            env.setdefault("TICKERWIRE_WEBHOOKS_ALLOW_PRIVATE_TARGETS", "true")
    return FullConfig.from_env(env)


def _service(name: str):
    def run(args: argparse.Namespace) -> int:
        from ..common.runtime.process import run_service

        if name == "projector":
            if getattr(args, "action", None) == "rebuild":
                from ..projector.rebuild import rebuild_main

                return rebuild_main(_config())
            if getattr(args, "action", None) == "accept-log":
                from ..projector.accept import accept_log_main

                return accept_log_main(_config(), args.start_from)
            from ..projector.app import serve as projector

            return run_service(name, projector, _config())
        if name == "api":
            from ..api.app import serve as api

            return run_service(name, api, _config())
        if name == "dispatcher":
            from ..webhooks.app import serve as dispatcher

            return run_service(name, dispatcher, _config())
        from ..stream.app import serve as stream

        return run_service(name, stream, _config())

    return run


def _fail(command: str, message: str, status: int) -> int:
    print(f"tickerwire {command}: {message}", file=sys.stderr)
    return status


def _run(command: str, coro) -> int:
    """Run an admin command; every failure is one line on stderr and a status: 2 for a bad
    argument or setting, 1 for a refusal or an unreachable dependency. Never a traceback."""
    import pydantic

    from ..common import kafka
    from ..common.runtime.process import command_failed
    from .admin import AdminError, BadArgument

    try:
        setup_logging("cli", setting("LOG_LEVEL", "WARNING") or "WARNING")
    except ConfigError as exc:
        coro.close()
        return _fail(command, str(exc), 2)
    kafka.quiet_client_logs()
    try:
        result = asyncio.run(coro)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"]) or "value"
        return _fail(
            command, f"invalid {where} {err.get('input')!r}: {err['msg']} (see tickerwire {command} --help)", 2
        )
    except BadArgument as exc:
        return _fail(command, str(exc), 2)
    except AdminError as exc:
        return _fail(command, str(exc), 1)
    except Exception as exc:  # a setting, a dependency, or the last resort: still one line
        return command_failed(command, exc)
    return result if isinstance(result, int) else 0


@contextlib.asynccontextmanager
async def _read_conn(config: FullConfig, *, read_only: bool = True):
    """A connection to the read model: read-only for admin commands, which never write it
    (only the sweep, the projector's own sweeper run once, writes badge statuses). Connecting
    is retried as the services retry it, within a bound (``command_connection``)."""
    from ..common.db import storage_errors
    from ..common.db.command import command_connection

    async with command_connection(
        config.direct_url,
        schema=config.read_model_schema,
        read_only=read_only,
        what=f"connect to {_where(config.direct_url)}",
    ) as conn:
        with storage_errors("query the read model"):
            yield conn


def _where(dsn: str) -> str:
    """host:port of a DSN (each of a multi-host one, in order), without credentials."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(dsn)
        hosts = parts.netloc.rpartition("@")[2]
        if "," in hosts:
            return hosts
        return f"{parts.hostname}:{parts.port or 5432}"
    except ValueError:
        return "the configured database"


def cmd_publish(args: argparse.Namespace) -> int:
    from .publish import parse_lines, publish_declared, read_source

    try:
        lines = read_source(args.file, sys.stdin)
    except OSError as exc:
        return _fail("publish", f"cannot read {args.file}: {exc.strerror}", 2)
    events, errors = parse_lines(lines)
    if errors:
        for err in errors:
            print(f"{args.file}:{err.line}: {err.reason}", file=sys.stderr)
        return _fail("publish", f"{len(errors)} invalid event(s); nothing was published", 1)

    async def go() -> int:
        await publish_declared(_config(), events)
        print(f"published {len(events)} event(s)")
        return 0

    return _run("publish", go())


async def _publish_one(config: FullConfig, event) -> None:
    from .publish import publish_declared

    await publish_declared(config, [event])


def cmd_workspace(args: argparse.Namespace) -> int:
    from .admin import workspace_event

    async def go() -> int:
        config = _config()
        async with _read_conn(config) as conn:
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
        await _publish_one(config, event)
        print(f"workspace {args.id}: {event.data.status} (version {event.version})")
        return 0

    return _run("workspace", go())


def cmd_key(args: argparse.Namespace) -> int:
    from .admin import issue_key, require_workspace, revoke_key_event

    async def go() -> int:
        config = _config()
        if args.action == "issue":
            async with _read_conn(config) as conn:
                await require_workspace(conn, args.workspace)
            key, event = issue_key(args.workspace, args.id)
            await _publish_one(config, event)
            print(f"key id: {event.data.id}", file=sys.stderr)
            print(key)  # shown once; only its hash is stored
            return 0
        async with _read_conn(config) as conn:
            event = await revoke_key_event(conn, args.id)
        await _publish_one(config, event)
        print(f"key {args.id} revoked")
        return 0

    return _run("key", go())


def cmd_webhooks(args: argparse.Namespace) -> int:
    """``webhooks ACTION``: each action but ``list`` publishes the endpoint's next snapshot."""
    from . import webhooks as hooks

    command = f"webhooks {args.action}"

    async def go() -> int:
        config = _config()
        if args.action == "list":
            async with _read_conn(config) as conn:
                lines = await hooks.endpoint_lines(conn, args.workspace, removed=args.all)
            if lines:
                print("\n".join(lines))
            return 0
        if args.action == "register":
            return await _register_webhook(config, args)
        return await _change_webhook(config, args)

    return _run(command, go())


async def _register_webhook(config: FullConfig, args: argparse.Namespace) -> int:
    from . import webhooks as hooks

    filters = {name: hooks.endpoint_filter(getattr(args, name), name) for name in ("locales", "tickers", "categories")}
    signing_key = config.signing_key()  # before anything is published: the secret must be shown
    await hooks.refuse_target(args.url, allow_private=config.webhooks_allow_private_targets)
    async with _read_conn(config) as conn:
        event = await hooks.register_event(
            conn,
            workspace_id=args.workspace,
            url=args.url,
            topic=hooks.posts_topic(config),
            endpoint_id=args.id,
            **filters,
        )
    await _publish_one(config, event)
    print(f"webhook endpoint id: {event.data.id} (workspace {args.workspace})", file=sys.stderr)
    print(hooks.shown_secret(signing_key, event.data.id, 1))  # shown once; derived, never stored
    return 0


async def _change_webhook(config: FullConfig, args: argparse.Namespace) -> int:
    from . import webhooks as hooks

    signing_key = config.signing_key() if args.action == "rotate-secret" else None
    rotation = None
    async with _read_conn(config) as conn:
        if args.action == "rotate-secret":
            rotation = await hooks.rotation_event(conn, args.id, config.webhooks_rotation_window_s)
            event = rotation.event
        elif args.action == "replay":
            topic = hooks.posts_topic(config)
            cursor = (
                await hooks.checked_cursor(conn, topic, args.start)
                if args.start is not None
                else await hooks.since_cursor(config, conn, topic, args.since)
            )
            event = await hooks.replay_event(conn, args.id, cursor)
        else:
            event = await hooks.status_event(conn, args.id, args.action)
    await _publish_one(config, event)
    if signing_key is not None and rotation is not None:
        until = rotation.old_signs_until.isoformat(timespec="seconds")
        print(
            f"webhook endpoint {args.id}: secret generation {event.data.secret_generation}; "
            f"the previous secret also signs until {until}",
            file=sys.stderr,
        )
        print(hooks.shown_secret(signing_key, args.id, event.data.secret_generation))  # shown once
    elif args.action == "replay":
        print(f"webhook endpoint {args.id}: replay {event.data.replay_seq} from {event.data.replay_from}")
    else:
        print(f"webhook endpoint {args.id}: {event.data.status} (version {event.version})")
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    from .admin import embed_event, require_workspace

    async def go() -> int:
        event = embed_event(args.id, args.workspace, args.kind)  # validates the ids first
        config = _config()
        async with _read_conn(config) as conn:
            await require_workspace(conn, args.workspace)
        await _publish_one(config, event)
        print(f"embed {args.id} created for {args.workspace}")
        return 0

    return _run("embed", go())


def cmd_heartbeat(args: argparse.Namespace) -> int:
    from .admin import heartbeat_event, require_embed

    async def go() -> int:
        event = heartbeat_event(args.embed, args.workspace, args.landed_at)  # validates, refuses the future
        config = _config()
        async with _read_conn(config) as conn:
            await require_embed(conn, args.embed, args.workspace)
        await _publish_one(config, event)
        print(f"heartbeat for {args.embed} landed at {event.data.landed_at.isoformat()}")
        return 0

    return _run("heartbeat", go())


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..projector.sweeper import sweep_once

    async def go() -> int:
        async with _read_conn(_config(), read_only=False) as conn:
            statuses = await sweep_once(conn)
        for ws, status in sorted(statuses.items()):
            print(f"{ws}\t{status}")
        return 0

    return _run("sweep", go())


def cmd_migrate(args: argparse.Namespace) -> int:
    from ..common.db.command import MIGRATION_STATEMENT_TIMEOUT_S, command_connection
    from ..readmodel.migrate import migrate

    async def go() -> int:
        from ..common.db import storage_errors

        config = _config()
        with storage_errors(f"migrate {_where(config.direct_url)}"):
            async with command_connection(config.direct_url, statement_timeout_s=MIGRATION_STATEMENT_TIMEOUT_S) as conn:
                applied = await migrate(conn, config.read_model_schema)
        print("\n".join(applied) or "up to date")
        return 0

    return _run("migrate", go())


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
            print(
                f"tickerwire topics {args.action}: {len(differences)} difference(s) from the declaration",
                file=sys.stderr,
            )
            return 1
        print("topics match the declaration")
        return 0

    return _run("topics", go())


def cmd_dead_letters(args: argparse.Namespace) -> int:
    from . import deadletters

    async def go() -> int:
        config = _config()
        async with _read_conn(config, read_only=args.action != "retry") as conn:
            if args.action == "list":
                found = await deadletters.list_letters(conn, kind=args.kind, topic=args.topic, limit=args.limit)
                for letter in found:
                    print(letter.line())
                print(
                    f"{len(found)} dead letter(s)" + (f" (the first {args.limit})" if len(found) == args.limit else ""),
                    file=sys.stderr,
                )
                return 0
            if args.action == "show":
                print("\n\n".join(letter.details() for letter in await deadletters.letters(conn, args.ids)))
                return 0
            if args.all:
                chosen = await deadletters.list_letters(conn, kind=args.kind, topic=args.topic, limit=args.limit)
            else:
                chosen = await deadletters.letters(conn, args.ids)
            for line in await deadletters.retry(config, conn, chosen):
                print(line)
            print(f"{len(chosen)} dead letter(s) published again", file=sys.stderr)
            return 0

    return _run("dead-letters", go())


def cmd_up(args: argparse.Namespace) -> int:
    from .up import up_main

    return up_main(args)


def cmd_failover(args: argparse.Namespace) -> int:
    from .up.failover import request_failover

    state_dir = Path(args.state_dir or setting("STATE_DIR", STATE_DIR_DEFAULT) or STATE_DIR_DEFAULT)
    try:
        print(request_failover(state_dir))
    except RuntimeError as exc:
        return _fail("failover", str(exc), 1)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    if args.markdown:
        from .settings import configuration_markdown

        sys.stdout.write(configuration_markdown())
        return 0
    for var, default in settings_table():
        print(f"{var}\t{default}")
    return 0


def cmd_schemas(args: argparse.Namespace) -> int:
    from tickerwire.schemas.export import export_all

    if args.action == "check":
        return _check_schema(args)
    try:
        paths = export_all(Path(args.out) if args.out else None)
    except OSError as exc:  # an unwritable --out, or the package's own folder on a read-only install
        return _fail("schemas export", f"cannot write {exc.filename or args.out}: {exc.strerror} (pass --out DIR)", 1)
    for path in paths:
        print(path)
    return 0


def _check_schema(args: argparse.Namespace) -> int:
    """Exit 0 when the proposed schema holds in ``--mode``, 1 when it does not, 2 on bad input."""
    from .admin import BadArgument
    from .schemacheck import report

    if not args.file:
        return _fail("schemas check", "give the proposed schema: tickerwire schemas check FILE", 2)
    try:
        lines, holds = report(args.file, args.mode)
    except BadArgument as exc:
        return _fail("schemas check", str(exc), 2)
    print("\n".join(lines))
    print(f"{args.mode}: {'compatible' if holds else 'incompatible'} (the mode this exit status answers)")
    return 0 if holds else 1


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line (what was wrong, where to look) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _bounded_int(low: int, high: int):
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range {low}..{high}")
        return value

    return parse


def _positive_seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds") from None
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"{raw!r} must be above 0 and below 86400 seconds")
    return value


def _timestamp(raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an ISO 8601 timestamp (e.g. 2026-01-01T00:00:00Z)") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{raw!r} needs a UTC offset (e.g. 2026-01-01T00:00:00Z)")
    return value


def _matching(pattern: str, what: str):
    def parse(raw: str) -> str:
        if not re.fullmatch(pattern, raw):
            raise argparse.ArgumentTypeError(f"{raw!r} is not a valid {what}")
        return raw

    return parse


def _dead_letter_kind(raw: str) -> str:
    from ..projector.metrics import DEAD_LETTER_KINDS  # only when given: the import costs every command 0.7 s

    if raw not in DEAD_LETTER_KINDS:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a reason kind; known: {', '.join(DEAD_LETTER_KINDS)}")
    return raw


#: The event contract's patterns (schemas/models.py), checked before anything is contacted.
_entity_id = _matching(r"[A-Za-z0-9_\-]{1,100}", "id (1 to 100 letters, digits, _ or -)")
_embed_id = _matching(r"bdg_[A-Za-z0-9]{4,64}", "embed id (bdg_ then 4 to 64 letters or digits)")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tickerwire")
    except PackageNotFoundError:
        return "unknown"


#: A webhook endpoint id, as the event contract has it (schemas/models.py).
_webhook_id = _matching(r"whe_[A-Za-z0-9]{4,64}", "webhook endpoint id (whe_ then 4 to 64 letters or digits)")


def _webhooks_parser(sub) -> None:
    hooks = sub.add_parser("webhooks", help="register and manage a workspace's webhook endpoints (docs/webhooks.md)")
    actions = hooks.add_subparsers(dest="action", required=True, metavar="ACTION")
    reg = actions.add_parser(
        "register", help="register an endpoint; prints its id (stderr) and its signing secret, once (stdout)"
    )
    reg.add_argument("--workspace", required=True, type=_entity_id, help="a workspace the read model already shows")
    reg.add_argument("--url", required=True, help="http(s) URL reaching a public address")
    reg.add_argument("--id", type=_webhook_id, help="endpoint id (default: whe_ and 24 random hex digits)")
    for name, example in (("locales", "en-US,de-DE"), ("tickers", "BTC,ETH"), ("categories", "bitcoin-etfs,defi")):
        reg.add_argument(f"--{name}", help=f"only posts of these {name}, the stream's filter (e.g. {example})")
    ls = actions.add_parser(
        "list",
        help="one line each: id, workspace, status, delivery state, delivered, secret generation, URL, filters",
    )
    ls.add_argument("--workspace", type=_entity_id, help="only this workspace's endpoints")
    ls.add_argument("--all", action="store_true", help="removed endpoints too")
    for name, what in (
        ("pause", "stop delivering (the position is kept)"),
        ("resume", "deliver again from the kept position; also enables an endpoint the dispatcher disabled"),
        ("remove", "remove the endpoint for good"),
        ("rotate-secret", "a new signing secret, printed once; the previous one also signs for the rotation window"),
    ):
        actions.add_parser(name, help=what).add_argument("id", type=_webhook_id, help="endpoint id (whe_...)")
    rep = actions.add_parser("replay", help="deliver again everything after a cursor or since a time")
    rep.add_argument("id", type=_webhook_id, help="endpoint id (whe_...)")
    start = rep.add_mutually_exclusive_group(required=True)
    start.add_argument("--from", dest="start", metavar="CURSOR", help="a resume cursor (c1~...) this read model issued")
    start.add_argument(
        "--since",
        type=_timestamp,
        metavar="TIME",
        help="what the posts topic received at or after this time (ISO 8601 with offset)",
    )
    hooks.set_defaults(func=cmd_webhooks)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tickerwire", description=__doc__)
    p.add_argument("--version", action="version", version=f"tickerwire {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    proj = sub.add_parser("projector", help="run the projector (the only writer of the read model)")
    proj.add_argument(
        "action",
        nargs="?",
        choices=["run", "rebuild", "accept-log"],
        default="run",
        help="run (default); rebuild the read model from the log; accept-log: move stored positions "
        "the log no longer holds (after a log reset) to its start or end",
    )
    proj.add_argument(
        "--from",
        dest="start_from",
        choices=["earliest", "latest"],
        default="earliest",
        help="accept-log: re-read from the log start (default) or skip to its end",
    )
    proj.set_defaults(func=_service("projector"))
    sub.add_parser("api", help="run the read API").set_defaults(func=_service("api"))
    sub.add_parser("stream", help="run the WebSocket stream").set_defaults(func=_service("stream"))
    sub.add_parser("dispatcher", help="run the webhook dispatcher (docs/webhooks.md)").set_defaults(
        func=_service("dispatcher")
    )

    pub = sub.add_parser("publish", help="validate JSON-lines events and publish them (all or nothing)")
    pub.add_argument("file", help="a JSON-lines file, or - for standard input")
    pub.set_defaults(func=cmd_publish)

    ws = sub.add_parser("workspace", help="create, suspend, reinstate or update a workspace")
    ws.add_argument("action", choices=["create", "suspend", "reinstate", "update"], help="what to do")
    ws.add_argument("id", type=_entity_id, help="workspace id (letters, digits, _ and -)")
    ws.add_argument("--name", help="display name (default: the id, or the current name)")
    ws.add_argument(
        "--rate-limit", type=_bounded_int(1, 1_000_000), help="requests per minute, 1..1000000 (default 60)"
    )
    ws.add_argument(
        "--daily-quota", type=_bounded_int(1, 1_000_000_000), help="requests per UTC day, 1..1000000000 (default 5000)"
    )
    ws.add_argument(
        "--stream-connections", type=_bounded_int(1, 10_000), help="concurrent stream connections, 1..10000 (default 5)"
    )
    ws.set_defaults(func=cmd_workspace)

    key = sub.add_parser("key", help="issue or revoke an API key")
    key_sub = key.add_subparsers(dest="action", required=True, metavar="ACTION")
    issue = key_sub.add_parser("issue", help="issue a key for an existing workspace (printed once on stdout)")
    issue.add_argument("workspace", type=_entity_id, help="id of a workspace the read model already shows")
    issue.add_argument("--id", type=_entity_id, help="key id (default derived from the key hash)")
    revoke = key_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id", type=_entity_id, help="key id, as printed by `key issue`")
    key.set_defaults(func=cmd_key)

    emb = sub.add_parser("embed", help="register an embed (badge or widget) for an existing workspace")
    emb.add_argument("id", type=_embed_id, help="embed id: bdg_ then 4 to 64 letters or digits")
    emb.add_argument("workspace", type=_entity_id, help="id of a workspace the read model already shows")
    emb.add_argument("--kind", choices=["badge", "widget"], default="badge", help="what is embedded (default badge)")
    emb.set_defaults(func=cmd_embed)

    hb = sub.add_parser("heartbeat", help="record a badge heartbeat of an existing embed")
    hb.add_argument("embed", type=_embed_id, help="embed id, bdg_<id>, registered for the workspace")
    hb.add_argument("workspace", type=_entity_id, help="the embed's workspace id")
    hb.add_argument(
        "--landed-at",
        type=_timestamp,
        help="when the ping landed (ISO 8601 with offset, not in the future); default now",
    )
    hb.set_defaults(func=cmd_heartbeat)

    _webhooks_parser(sub)

    dl = sub.add_parser("dead-letters", help="list, show or retry the records the projector set aside")
    dl_sub = dl.add_subparsers(dest="action", required=True, metavar="ACTION")
    letter_id = _bounded_int(1, 2**63 - 1)
    dl_list = dl_sub.add_parser(
        "list", help="one line each: id, topic[partition]@offset, reason kind, received at, reason"
    )
    dl_show = dl_sub.add_parser("show", help="everything stored of the given dead letters: reason, key, value")
    dl_show.add_argument("ids", nargs="+", type=letter_id, metavar="ID", help="dead letter id, as `list` prints it")
    dl_retry = dl_sub.add_parser(
        "retry",
        help="publish the given dead letters again, after a fix, and remove them "
        "(all or none: refused when today's contract would refuse one)",
    )
    dl_retry.add_argument("ids", nargs="*", type=letter_id, metavar="ID", help="dead letter id, as `list` prints it")
    dl_retry.add_argument("--all", action="store_true", help="every dead letter (that --kind and --topic select)")
    for cmd in (dl_list, dl_retry):
        cmd.add_argument(
            "--kind",
            type=_dead_letter_kind,
            help="only this reason kind (codec, corrupt_batch, undecodable, unknown_schema_id, "
            "unknown_type, unknown_schema_version, schema, wrong_topic, rejected)",
        )
        cmd.add_argument("--topic", help="only this topic")
        cmd.add_argument(
            "--limit", type=_bounded_int(1, 100_000), default=1000, help="at most this many (default 1000)"
        )
    dl.set_defaults(func=cmd_dead_letters)

    sub.add_parser("sweep", help="run one badge-sweeper tick now").set_defaults(func=cmd_sweep)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=cmd_migrate)
    top = sub.add_parser(
        "topics", help="create the declared topics, or compare a cluster's topics with the declaration"
    )
    top.add_argument(
        "action",
        choices=["ensure", "check"],
        help="ensure: create missing topics, then check; check: list each difference, exit 1 if any",
    )
    top.set_defaults(func=cmd_topics)
    cfg = sub.add_parser("config", help="list the settings (environment variables) and defaults")
    cfg.add_argument(
        "--markdown", action="store_true", help="print docs/configuration.md: every setting, its default and meaning"
    )
    cfg.set_defaults(func=cmd_config)

    sch = sub.add_parser(
        "schemas", help="write the JSON Schema files of the event contract, or check a proposed one against them"
    )
    sch.add_argument(
        "action",
        choices=["export", "check"],
        help="export: write the files; check FILE: compare a proposed schema with the published versions",
    )
    sch.add_argument("file", nargs="?", help="check: the proposed JSON Schema")
    sch.add_argument("--out", help="export: folder (default: the package's schemas/events)")
    sch.add_argument(
        "--mode",
        choices=["backward", "backward_transitive", "forward", "forward_transitive", "full", "full_transitive"],
        default="full",
        help="check: the mode the exit status answers (default full; every mode is printed)",
    )
    sch.set_defaults(func=cmd_schemas)

    fo = sub.add_parser(
        "failover",
        help="PostgreSQL failover of a running `tickerwire up --replicas N`: kill the primary, promote replica 1",
    )
    fo.add_argument(
        "--state-dir", help=f"the `up`'s state directory (default TICKERWIRE_STATE_DIR or {STATE_DIR_DEFAULT})"
    )
    fo.set_defaults(func=cmd_failover)

    up = sub.add_parser("up", help="start the whole system (embedded PostgreSQL and broker unless configured)")
    # Their defaults come from the environment when `up` starts (services/cli/up/command.py: up_main).
    up.add_argument(
        "--state-dir",
        help=f"where logs, the embedded data and up.json go (default TICKERWIRE_STATE_DIR or {STATE_DIR_DEFAULT})",
    )
    up.add_argument(
        "--database-url", help="use this PostgreSQL instead of the embedded one (default TICKERWIRE_DATABASE_URL)"
    )
    up.add_argument(
        "--kafka",
        dest="kafka_bootstrap_servers",
        help="use this Kafka instead of the embedded broker (default TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS)",
    )
    up.add_argument(
        "--broker",
        choices=("embedded", "apache"),
        help="the broker up starts: embedded (the default: Tansu, log in memory, the database re-created on "
        "each start) or apache (Apache Kafka, needs Java 17+ and Maven; log and database kept in the state "
        "directory across starts). Not with --kafka",
    )
    up.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        default=1,
        help="with --broker apache: Apache Kafka nodes to start, 1 (the default) or 3 (one KRaft quorum of "
        "three broker+controller nodes on this machine, topics with replication factor 3 and "
        "min.insync.replicas=2, as in production; log in the state directory's kafka3/)",
    )
    port = _bounded_int(1, 65535)
    for flag, what, var, default in (
        ("--api-port", "partner API", "API_PORT", 8080),
        ("--stream-port", "partner stream", "STREAM_PORT", 8081),
        ("--api-admin-port", "API admin (/healthz /readyz /metrics)", "API_ADMIN_PORT", 9080),
        ("--stream-admin-port", "stream admin", "STREAM_ADMIN_PORT", 9081),
        ("--projector-admin-port", "projector admin", "PROJECTOR_ADMIN_PORT", 9082),
        ("--webhooks-admin-port", "webhook dispatcher admin", "WEBHOOKS_ADMIN_PORT", 9083),
    ):
        up.add_argument(
            flag, type=port, help=f"{what} port (default TICKERWIRE_{var} or {default}; a free one if taken)"
        )
    up.add_argument(
        "--posts", type=_bounded_int(0, 1_000_000), default=2000, help="demo posts to publish (default 2000)"
    )
    up.add_argument(
        "--tokens", type=_bounded_int(0, 100_000), default=3000, help="demo tokens to publish (default 3000)"
    )
    up.add_argument("--no-demo", action="store_true", help="publish no demo dataset")
    up.add_argument(
        "--demo",
        action="store_true",
        help="publish the demo key, dataset and trickle even to a configured broker (the default only "
        "with the embedded one)",
    )
    up.add_argument(
        "--replicas",
        type=_bounded_int(0, 8),
        default=0,
        help="also start this many streaming replicas of the embedded PostgreSQL, the API reading from "
        "them (TICKERWIRE_DATABASE_READ_URLS; default 0)",
    )
    for service in ("api", "stream"):
        up.add_argument(
            f"--{service}-processes",
            type=_bounded_int(1, 16),
            default=1,
            help=f"run this many {service} processes on its one partner port (TICKERWIRE_PORT_SHARING, "
            "SO_REUSEPORT), each on its own admin port (default 1)",
        )
    up.add_argument("--no-trickle", action="store_true", help="do not publish a new demo post every few seconds")
    up.add_argument(
        "--trickle-interval", type=_positive_seconds, default=5.0, help="seconds between live demo posts (default 5)"
    )
    up.set_defaults(func=cmd_up)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "dead-letters" and args.action == "retry" and bool(args.ids) == bool(args.all):
        parser.exit(
            2,
            "tickerwire dead-letters retry: give dead letter ids or --all, not both nor neither "
            "(see tickerwire dead-letters retry --help)\n",
        )
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"tickerwire: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
