"""One name per concept: no two modules of the product define a public class, function or type
alias of the same name, unless ALLOWED below gives the reason.

A name that means two things sends a reader to the wrong module (two `Page`s, two `PostFacts`);
each is named by its role instead. The product's packages are checked apart: the services with
their contract and their development stack, and each client (a client is its own package).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).parents[2]

#: Each package whose names must be unique within it, as its folders.
PACKAGES = {
    "the services, their contract and devstack": ("services", "schemas", "devstack"),
    "the Python client": ("clients/python/src",),
}

#: Names defined in several modules on purpose, with the reason.
ALLOWED = {
    # Every service's app module has the same three entry points, so `tickerwire <service>`,
    # the devstack and the tests start any service the same way.
    "create_app": "the per-service application factory (services/<name>/app.py)",
    "readiness": "the per-service readiness check (services/<name>/app.py)",
    "serve": "the per-service entry point (services/<name>/app.py)",
    # Every command module of the CLI adds its own parsers, which services/cli/main.py assembles.
    "register": "a command module's parsers and handler (services/cli/*.py, services/cli/up/parser.py)",
}


def public_names(tree: ast.Module) -> list[str]:
    """The module's top-level public classes, functions and CamelCase type aliases."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()]
    return [n for n in names if not n.startswith("_")]


def definitions(folders: tuple[str, ...]) -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            for name in public_names(ast.parse(path.read_text(), str(path))):
                where[name].append(str(path.relative_to(REPO)))
    return where


def collisions(folders: tuple[str, ...]) -> list[str]:
    return [
        f"{name}: {', '.join(paths)}"
        for name, paths in sorted(definitions(folders).items())
        if len(paths) > 1 and name not in ALLOWED
    ]


def test_no_two_modules_define_one_public_name():
    found = [f"{package}: {line}" for package, folders in PACKAGES.items() for line in collisions(folders)]
    assert not found, "rename each by its role, or add it to ALLOWED with the reason:\n" + "\n".join(found)


def test_every_allowed_name_is_still_defined_twice():
    """An allow-list entry whose collision is gone is dead weight: remove it."""
    stale = [
        name
        for name in ALLOWED
        if not any(len(definitions(folders).get(name, [])) > 1 for folders in PACKAGES.values())
    ]
    assert stale == []


def test_the_check_sees_a_type_alias_and_a_class_of_one_name():
    a = ast.parse("Direction = Literal['older', 'newer']\nMAX = 3\n_Private = int\n")
    b = ast.parse("class Direction:\n    pass\n")
    assert public_names(a) == ["Direction"] and public_names(b) == ["Direction"]
