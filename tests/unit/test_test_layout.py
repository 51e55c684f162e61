"""The suite's own rules: shared helpers live in tests/support (no test module imports another),
and tests use public names only (no call of a private method of product code)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parents[1]
#: Underscore names that are public API (namedtuple's, os._exit).
PUBLIC_UNDERSCORE = {"_replace", "_asdict", "_make", "_fields", "_exit"}


def modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(TESTS.rglob("*.py"))]


def test_no_test_module_imports_another_test_module():
    offenders = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("tests.")):
                names = [node.module or ""] + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("tests.")]
            else:
                continue  # not an import of this suite's modules
            if any(part.startswith("test_") for name in names for part in name.split(".")):
                offenders.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert offenders == [], "move shared helpers into tests/support"


def test_no_test_calls_a_private_method_of_another_object():
    offenders = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            attr, owner = node.func.attr, node.func.value
            private = attr.startswith("_") and not attr.startswith("__") and attr not in PUBLIC_UNDERSCORE
            if private and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                offenders.append(f"{path.relative_to(TESTS)}:{node.lineno} .{attr}()")
    assert offenders == []
