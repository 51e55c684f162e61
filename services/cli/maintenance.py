"""``tickerwire sweep | migrate | topics | config``: the read model's and the topics' upkeep,
and the list of settings."""

from __future__ import annotations

import argparse
import sys

from .running import cli_config, database_hosts, read_conn, run_admin
from .settings import settings_table


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..projector.sweeper import sweep_once

    async def go() -> int:
        async with read_conn(cli_config(), read_only=False) as conn:
            statuses = await sweep_once(conn)
        for ws, status in sorted(statuses.items()):
            print(f"{ws}\t{status}")
        return 0

    return run_admin("sweep", go())


def cmd_migrate(args: argparse.Namespace) -> int:
    from ..common.db.command import MIGRATION_STATEMENT_TIMEOUT_S, command_connection
    from ..readmodel.migrate import migrate

    async def go() -> int:
        from ..common.db import storage_errors

        config = cli_config()
        with storage_errors(f"migrate {database_hosts(config.direct_url)}"):
            async with command_connection(config.direct_url, statement_timeout_s=MIGRATION_STATEMENT_TIMEOUT_S) as conn:
                applied = await migrate(conn, config.read_model_schema)
        print("\n".join(applied) or "up to date")
        return 0

    return run_admin("migrate", go())


def cmd_topics(args: argparse.Namespace) -> int:
    from ..common import kafka

    async def go() -> int:
        config = cli_config()
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

    return run_admin("topics", go())


def cmd_config(args: argparse.Namespace) -> int:
    if args.markdown:
        from .settings import configuration_markdown

        sys.stdout.write(configuration_markdown())
        return 0
    for var, default in settings_table():
        print(f"{var}\t{default}")
    return 0


def register(sub) -> None:
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
