"""The ``tickerwire`` console script: services, publisher, admin commands and ``up``."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from ..common.runtime.config import ConfigError
from . import admin, deadletters, maintenance, processes, publish, schemacheck, webhooks
from .up import failover, parser as up_parser

#: The command modules, in the order ``tickerwire --help`` lists their commands; each one's
#: ``register(subparsers)`` adds its parsers and sets their handler (``func``).
COMMANDS = (processes, publish, admin, webhooks, deadletters, maintenance, schemacheck, failover, up_parser)


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line (what was wrong, where to look) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tickerwire")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tickerwire", description=__doc__)
    p.add_argument("--version", action="version", version=f"tickerwire {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
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
