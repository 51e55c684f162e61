"""Both clients cover every operation of the contract: each ``operationId`` under ``paths`` of
schemas/openapi.json (not the ``webhooks`` messages the partner receives) is mapped to a method
in the Python client's ``OPERATIONS`` (clients/python/src/tickerwire_client/operations.py) and in
the TypeScript client's (clients/typescript/src/operations.ts), and every method mapped exists:
on ``AsyncClient`` and on the blocking ``Client`` for Python, on ``Client`` for TypeScript.

The check reads the sources without importing them (so it can be run on a changed copy), and one
failure names every operation without a method and every method that does not exist."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

REPO = Path(__file__).parents[2]
PYTHON = REPO / "clients" / "python" / "src" / "tickerwire_client"
TYPESCRIPT = REPO / "clients" / "typescript" / "src"


def contract_operations(openapi: Path = REPO / "schemas" / "openapi.json") -> set[str]:
    """Every operationId under ``paths`` (the calls a partner makes; ``webhooks`` are received)."""
    document = json.loads(openapi.read_text())
    return {
        operation["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }


def python_mapping(package: Path) -> dict[str, str]:
    tree = ast.parse((package / "operations.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "OPERATIONS":
            assert node.value is not None
            return ast.literal_eval(node.value)
    raise AssertionError("no OPERATIONS in operations.py")


def python_methods(package: Path) -> dict[str, set[str]]:
    """The public methods of ``AsyncClient`` (its own and its bases' in the package) and of ``Client``."""
    classes: dict[str, tuple[list[str], set[str]]] = {}
    for path in package.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                methods = {
                    item.name
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_")
                }
                classes[node.name] = ([b.id for b in node.bases if isinstance(b, ast.Name)], methods)

    def of(name: str) -> set[str]:
        bases, methods = classes.get(name, ([], set()))
        return methods.union(*(of(base) for base in bases))

    return {"AsyncClient": of("AsyncClient"), "Client": of("Client")}


def typescript_mapping(src: Path) -> dict[str, str]:
    text = (src / "operations.ts").read_text()
    body = re.search(r"export const OPERATIONS = \{(.*?)\}", text, re.S)
    assert body, "no OPERATIONS object in operations.ts"
    return dict(re.findall(r"^\s*(\w+):\s*\"(\w+)\",?\s*$", body.group(1), re.M))


def typescript_methods(src: Path) -> set[str]:
    """The methods of ``export class Client`` in http.ts: the members at its first indentation."""
    text = (src / "http.ts").read_text()
    start = text.index("export class Client ")
    end = text.index("\n}\n", start)
    return set(re.findall(r"^  (?:async )?(?!private |constructor)(\w+)(?:<[^>]*>)?\(", text[start:end], re.M))


def missing(operations: set[str], python: Path = PYTHON, typescript: Path = TYPESCRIPT) -> list[str]:
    """Every operation without a method and every mapped method that does not exist, one line each."""
    problems: list[str] = []
    py_map, ts_map = python_mapping(python), typescript_mapping(typescript)
    py_methods, ts_methods = python_methods(python), typescript_methods(typescript)
    for operation in sorted(operations):
        for client, mapping in (("Python", py_map), ("TypeScript", ts_map)):
            if operation not in mapping:
                problems.append(f"{operation}: no method in the {client} client")
    for operation, method in sorted(py_map.items()):
        for cls, methods in py_methods.items():
            if method not in methods:
                problems.append(f"{operation}: the Python client's {cls} has no method {method}")
    for operation, method in sorted(ts_map.items()):
        if method not in ts_methods:
            problems.append(f"{operation}: the TypeScript client's Client has no method {method}")
    for client, mapping in (("Python", py_map), ("TypeScript", ts_map)):
        unknown = sorted(set(mapping) - operations)
        problems += [f"{operation}: mapped in the {client} client, but no such operation" for operation in unknown]
    return problems


def test_every_operation_of_the_contract_has_a_method_in_both_clients():
    assert missing(contract_operations()) == []


def test_the_check_reads_the_clients_it_checks():
    operations = contract_operations()
    assert {"listPosts", "listChanges", "listWebhookAttempts"} <= operations and "receivePostCreated" not in operations
    assert {"changes", "webhook_endpoints"} <= python_methods(PYTHON)["Client"]
    assert {"changes", "webhookEndpoints", "send", "get"} <= typescript_methods(TYPESCRIPT)
    assert "attempt" not in typescript_methods(TYPESCRIPT)  # private


def copies(tmp_path: Path) -> tuple[Path, Path]:
    python, typescript = tmp_path / "py", tmp_path / "ts"
    shutil.copytree(PYTHON, python)
    shutil.copytree(TYPESCRIPT, typescript)
    return python, typescript


def test_a_client_with_a_method_removed_fails_naming_the_operation(tmp_path: Path):
    python, typescript = copies(tmp_path)
    sync = python / "sync.py"
    sync.write_text(sync.read_text().replace("    def changes(\n", "    def changes_renamed(\n"))
    calls = python / "webhook_calls.py"
    calls.write_text(calls.read_text().replace("async def webhook_attempts(", "async def attempts_renamed("))
    http = typescript / "http.ts"
    http.write_text(http.read_text().replace("  sendWebhookTest(id", "  sendTest(id"))
    assert missing(contract_operations(), python, typescript) == [
        "listChanges: the Python client's Client has no method changes",
        "listWebhookAttempts: the Python client's AsyncClient has no method webhook_attempts",
        "sendWebhookTestEvent: the TypeScript client's Client has no method sendWebhookTest",
    ]


def test_an_operation_left_out_of_a_mapping_is_named(tmp_path: Path):
    python, typescript = copies(tmp_path)
    operations = python / "operations.py"
    operations.write_text(operations.read_text().replace('    "listChanges": "changes",\n', ""))
    ts = typescript / "operations.ts"
    ts.write_text(ts.read_text().replace('  getToken: "token",\n', "").replace("  listTokens:", "  listTokenz:"))
    assert missing(contract_operations(), python, typescript) == [
        "getToken: no method in the TypeScript client",
        "listChanges: no method in the Python client",
        "listTokens: no method in the TypeScript client",
        "listTokenz: mapped in the TypeScript client, but no such operation",
    ]
