"""The ``tickerwire`` console script: services, publisher, admin commands and ``up``."""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import NoReturn

from ..common.runtime.config import ConfigError

#: The command modules (relative to this package), in the order ``tickerwire --help`` lists
#: their commands, and the commands each registers: its ``register(subparsers)`` adds their
#: parsers and sets their handler (``func``). A command line that names a command imports its
#: module alone (``tickerwire up`` refuses a second `up` in a fraction of a second, not after
#: importing every command's libraries); ``--help`` and a mistyped command import them all.
COMMANDS: dict[str, tuple[str, ...]] = {
    ".processes": ("projector", "api", "stream", "dispatcher"),
    ".publish": ("publish",),
    ".admin": ("workspace", "key", "embed", "heartbeat"),
    ".webhooks": ("webhooks",),
    ".deadletters": ("dead-letters",),
    ".maintenance": ("sweep", "migrate", "topics", "config"),
    ".schemacheck": ("schemas",),
    ".up.failover": ("failover",),
    ".up.parser": ("up",),
}


def command_modules(argv: list[str] | None = None) -> list[ModuleType]:
    """The modules whose parsers ``argv`` needs: the named command's, else every one."""
    named = next((arg for arg in (argv or []) if not arg.startswith("-")), None)
    chosen = [name for name, commands in COMMANDS.items() if named in commands] or list(COMMANDS)
    return [importlib.import_module(name, __package__) for name in chosen]


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


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the one ``argv`` names (and only that one)."""
    p = _Parser(prog="tickerwire", description=__doc__)
    p.add_argument("--version", action="version", version=f"tickerwire {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in command_modules(argv):
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"tickerwire: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
