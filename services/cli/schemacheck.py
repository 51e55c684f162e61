"""``tickerwire schemas export | check FILE``: write the event contract's JSON Schema files, or
check a proposed JSON Schema of an event type against its published versions
(``schemas/events``), per compatibility mode (:mod:`tickerwire.schemas.compat`)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import orjson

from tickerwire.schemas.compat import MODES, Schema, check
from tickerwire.schemas.export import EVENTS_DIR

from .admin import BadArgument
from .running import fail


def _declared(doc: dict, name: str) -> object:
    """The one value a schema's property ``name`` allows (its ``const``, single ``enum`` value or
    ``default``), or None."""
    props = doc.get("properties")
    prop = props.get(name) if isinstance(props, dict) else None
    if not isinstance(prop, dict):
        return None
    if "const" in prop:
        return prop["const"]
    if isinstance(prop.get("enum"), list) and len(prop["enum"]) == 1:
        return prop["enum"][0]
    return prop.get("default")


def event_type(doc: dict) -> str:
    """The event type a schema describes: its ``type`` property's ``const``."""
    kind = _declared(doc, "type")
    if not isinstance(kind, str):
        raise BadArgument("the schema does not say its event type (a `type` property with a `const`)")
    return kind


def published(kind: str, upto: int | None = None, folder: Path = EVENTS_DIR) -> list[Schema]:
    """The published versions of ``kind`` (those up to ``schema_version`` ``upto``), oldest first."""
    found = []
    for path in folder.glob(f"{kind}.v*.schema.json"):
        m = re.fullmatch(rf"{re.escape(kind)}\.v(\d+)\.schema\.json", path.name)
        if m is not None and (upto is None or int(m.group(1)) <= upto):
            found.append((int(m.group(1)), Schema(f"{kind}.v{m.group(1)}", orjson.loads(path.read_bytes()))))
    if not found:
        known = sorted({p.name.split(".v", 1)[0] for p in folder.glob("*.schema.json")})
        raise BadArgument(f"no published schema of event type {kind!r} (known: {', '.join(known)})")
    return [schema for _, schema in sorted(found, key=lambda pair: pair[0])]


def proposed_schema(path: str) -> Schema:
    """The proposed schema in ``path`` ('-' is not read: a file only), or :class:`BadArgument`."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise BadArgument(f"cannot read {path}: {exc.strerror}") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadArgument(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadArgument(f"{path} is not a JSON Schema object")
    return Schema("proposed", doc)


def report(path: str, mode: str) -> tuple[list[str], bool]:
    """The lines to print, and whether ``mode`` holds."""
    proposed = proposed_schema(path)
    version = _declared(proposed.doc, "schema_version")
    versions = published(event_type(proposed.doc), version if type(version) is int else None)
    try:
        verdicts = check(proposed, versions)
    except ValueError as exc:  # a $ref that goes nowhere, a schema that is not an object
        raise BadArgument(str(exc)) from None
    lines = [f"{path}: compared with {', '.join(v.name for v in versions)} (latest {versions[-1].name})"]
    for name in MODES:
        found = verdicts[name]
        lines.append(f"{name}: {'incompatible' if found else 'compatible'}")
        lines += [f"  {line}" for line in found]
    return lines, not verdicts[mode]


def cmd_schemas(args: argparse.Namespace) -> int:
    from tickerwire.schemas.export import export_all

    if args.action == "check":
        return _check_schema(args)
    try:
        paths = export_all(Path(args.out) if args.out else None)
    except OSError as exc:  # an unwritable --out, or the package's own folder on a read-only install
        return fail("schemas export", f"cannot write {exc.filename or args.out}: {exc.strerror} (pass --out DIR)", 1)
    for path in paths:
        print(path)
    return 0


def _check_schema(args: argparse.Namespace) -> int:
    """Exit 0 when the proposed schema holds in ``--mode``, 1 when it does not, 2 on bad input."""
    if not args.file:
        return fail("schemas check", "give the proposed schema: tickerwire schemas check FILE", 2)
    try:
        lines, holds = report(args.file, args.mode)
    except BadArgument as exc:
        return fail("schemas check", str(exc), 2)
    print("\n".join(lines))
    print(f"{args.mode}: {'compatible' if holds else 'incompatible'} (the mode this exit status answers)")
    return 0 if holds else 1


def register(sub) -> None:
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
