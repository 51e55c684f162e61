"""The TypeScript client's Python helper (clients/typescript/test/support/stack_helper.py) runs
only inside that client's suite, after the README's test command; an import the Python side
renamed would otherwise surface there as minutes of timeouts. Its imports are checked here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HELPER = Path(__file__).resolve().parents[2] / "clients" / "typescript" / "test" / "support" / "stack_helper.py"


def test_the_helper_imports():
    spec = importlib.util.spec_from_file_location("ts_stack_helper", HELPER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its main() runs only as __main__
    assert callable(module.main)
