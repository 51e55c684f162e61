"""The `tickerwire` parser: every flag and argument explains itself."""

from __future__ import annotations

import argparse

import pytest

from tickerwire.services.cli.main import build_parser


def parsers(parser: argparse.ArgumentParser, path: str = "tickerwire"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, f"{path} {name}")


def test_every_flag_and_argument_has_help_text():
    missing = [
        f"{path}: {action.option_strings or action.dest}"
        for path, parser in parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help
    ]
    assert not missing, missing
    commands = {path for path, _ in parsers(build_parser())}
    assert {"tickerwire up", "tickerwire heartbeat", "tickerwire key issue"} <= commands


@pytest.mark.parametrize(
    "argv",
    [
        ["heartbeat", "bdg_abcd", "ws", "--landed-at", "yesterday"],
        ["embed", "bdg_acc", "ws"],
        ["workspace", "update", "ws", "--daily-quota", "0"],
        ["up", "--api-port", "70000"],
    ],
)
def test_a_bad_argument_is_one_line_and_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--help" in err


def test_the_command_table_names_what_each_module_registers():
    import argparse
    import importlib

    from tickerwire.services.cli.main import COMMANDS

    for name, commands in COMMANDS.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name, "tickerwire.services.cli").register(sub)
        assert tuple(sub.choices) == commands, name


def test_a_named_command_imports_its_own_module_only():
    """`tickerwire up` (say, a second one, refused) does not wait for every command's libraries."""
    import subprocess
    import sys

    probe = (
        "import sys; from tickerwire.services.cli.main import build_parser; "
        "build_parser(['up', '--no-trickle']); "
        "print(sorted(m for m in sys.modules if m.startswith('tickerwire.services.cli.')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60).stdout
    assert "tickerwire.services.cli.up.parser" in loaded
    for other in ("deadletters", "webhooks", "admin", "publish", "maintenance"):
        assert f"tickerwire.services.cli.{other}'" not in loaded, loaded
