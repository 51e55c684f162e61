"""Schema compatibility: can a reader of one JSON Schema read every document written by another?

Pure code, no I/O; ``tickerwire schemas check`` runs it against the published versions of an
event type (schemas/README.md#compatibility-check). The modes are Confluent Schema Registry's:

- ``backward``: the proposed schema reads what the latest published version wrote;
- ``forward``: the latest published version reads what the proposed schema writes;
- ``full``: both; the ``_transitive`` forms hold against every published version, which a read
  model rebuilt from offset 0 needs.

The comparison follows each schema's local ``$ref``\\ s and ``anyOf``/``oneOf`` branches and
compares types, ``const``/``enum`` values, bounds, patterns, object properties (required fields,
and a closed object's unknown fields) and array items. A writer is taken to write only the
properties it declares: an open object (no ``additionalProperties: false``) lets a reader ignore
fields it does not know, it does not promise fields of any type. ``if``/``then``/``else`` and
``not`` are not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

#: The modes, in the order they are reported.
MODES = ("backward", "backward_transitive", "forward", "forward_transitive", "full", "full_transitive")

_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_ANY = object()


@dataclass(frozen=True, slots=True)
class Schema:
    """One schema document and the name it is reported by (``post.v2``, ``proposed``)."""

    name: str
    doc: dict

    def resolve(self, node: Any) -> dict:
        """``node`` with its local ``$ref`` followed (sibling keywords kept); a boolean schema
        ``true`` is ``{}``; ``false`` accepts nothing."""
        if node is True:
            return {}
        if node is False:
            return {"not": {}}
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            ref, rest = node["$ref"], {k: v for k, v in node.items() if k != "$ref"}
            target: Any = self.doc
            for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else ["\0"]:
                target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
            if not isinstance(target, dict) or (seen := seen + 1) > 64:
                raise ValueError(f"{self.name}: cannot resolve $ref {ref!r} (only local refs are followed)")
            node = {**target, **rest}
        if not isinstance(node, dict):
            raise ValueError(f"{self.name}: a schema must be an object or a boolean, not {node!r}")
        return node


def _types(node: dict) -> set[str] | None:
    """The JSON types a node allows, or None for any."""
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return set(declared)
    return None


def _values(node: dict) -> list | object:
    """The values a node allows (``const``/``enum``), or ``_ANY``."""
    if "const" in node:
        return [node["const"]]
    if "enum" in node:
        return list(node["enum"])
    return _ANY


def _branches(side: Schema, node: dict) -> list[dict]:
    for key in ("anyOf", "oneOf"):
        if key in node:
            base = {k: v for k, v in node.items() if k != key}
            return [{**base, **side.resolve(b)} for branch in node[key] for b in _branches(side, side.resolve(branch))]
    return [node]


@dataclass(frozen=True, slots=True)
class _Pair:
    """A reader and a writer, compared node by node; ``out`` collects what the reader cannot read."""

    reader: Schema
    writer: Schema
    out: list[str]

    def miss(self, path: str, what: str) -> None:
        self.out.append(f"{path or '(root)'}: {what}")

    def compare(self, r: Any, w: Any, path: str) -> None:
        r, w = self.reader.resolve(r), self.writer.resolve(w)
        written, readable = _branches(self.writer, w), _branches(self.reader, r)
        if len(written) > 1:
            for branch in written:
                self.compare_one_of(readable, branch, path)
        else:
            self.compare_one_of(readable, w, path)

    def compare_one_of(self, readable: list[dict], w: dict, path: str) -> None:
        """``w`` is read if one reader branch reads it; else the closest branch's differences."""
        attempts: list[list[str]] = []
        for r in readable:
            found: list[str] = []
            _Pair(self.reader, self.writer, found).compare_single(r, w, path)
            if not found:
                return
            attempts.append(found)
        best: list[str] = min(attempts, key=len)
        self.out.extend(best)

    def compare_single(self, r: dict, w: dict, path: str) -> None:
        if r.get("not") == {}:
            self.miss(path, "the reader accepts nothing here")
            return
        if not self.same_types(r, w, path):
            return
        self.same_values(r, w, path)
        self.within_bounds(r, w, path)
        if "pattern" in r and r["pattern"] != w.get("pattern"):
            self.miss(path, f"pattern {w.get('pattern')!r} changed to {r['pattern']!r}")
        if "properties" in r or "properties" in w or "required" in r:
            self.compare_objects(r, w, path)
        if "items" in r and "items" in w:
            self.compare(r["items"], w["items"], f"{path}[]")

    def same_types(self, r: dict, w: dict, path: str) -> bool:
        rt, wt = _types(r), _types(w)
        if rt is None:
            return True
        if wt is None:
            self.miss(path, f"any type is written; the reader reads only {', '.join(sorted(rt))}")
            return False
        lost = sorted(t for t in wt if t not in rt and not (t == "integer" and "number" in rt))
        if lost:
            self.miss(path, f"type {', '.join(sorted(wt))} narrowed to {', '.join(sorted(rt))}")
            return False
        return True

    def same_values(self, r: dict, w: dict, path: str) -> None:
        rv, wv = _values(r), _values(w)
        if rv is _ANY:
            return
        assert isinstance(rv, list)
        if wv is _ANY:
            self.miss(path, f"any value is written; the reader reads only {_shown(rv)}")
            return
        assert isinstance(wv, list)
        lost = [v for v in wv if v not in rv]
        if lost:
            self.miss(path, f"value {_shown(lost)} removed (the reader reads {_shown(rv)})")

    def within_bounds(self, r: dict, w: dict, path: str) -> None:
        for key in _UPPER:
            if key in r and (key not in w or w[key] > r[key]):
                self.miss(path, f"{key} {w.get(key, 'none')} lowered to {r[key]}")
        for key in _LOWER:
            if key in r and (key not in w or w[key] < r[key]):
                self.miss(path, f"{key} {w.get(key, 'none')} raised to {r[key]}")

    def compare_objects(self, r: dict, w: dict, path: str) -> None:
        rprops, wprops = r.get("properties", {}), w.get("properties", {})
        closed = r.get("additionalProperties") is False
        for name, sub in wprops.items():
            where = f"{path}.{name}" if path else name
            if name in rprops:
                self.compare(rprops[name], sub, where)
            elif closed:
                self.miss(where, f"written by {self.writer.name}, not allowed by {self.reader.name} (a closed object)")
        written = set(w.get("required", ()))
        for name in r.get("required", ()):
            if name not in written:
                state = "optional" if name in wprops else "absent"
                where = f"{path}.{name}" if path else name
                self.miss(where, f"required by {self.reader.name}, {state} in {self.writer.name}")


def _shown(values: list) -> str:
    return ", ".join(repr(v) for v in values)


def unreadable(reader: Schema, writer: Schema) -> list[str]:
    """What ``reader`` cannot read of the documents ``writer`` allows, one line each (empty: it reads them all)."""
    out: list[str] = []
    _Pair(reader, writer, out).compare(reader.doc, writer.doc, "")
    return out


def _against(proposed: Schema, published: Iterable[Schema], backward: bool, forward: bool) -> list[str]:
    lines = []
    for old in published:
        if backward:
            lines += [f"backward vs {old.name}: {line}" for line in unreadable(proposed, old)]
        if forward:
            lines += [f"forward vs {old.name}: {line}" for line in unreadable(old, proposed)]
    return lines


def check(proposed: Schema, published: list[Schema]) -> dict[str, list[str]]:
    """Per mode, the breaking differences of ``proposed`` against ``published`` (oldest first;
    the last is the latest); an empty list: compatible in that mode."""
    if not published:
        raise ValueError("nothing published to compare with")
    latest = published[-1:]
    return {
        "backward": _against(proposed, latest, True, False),
        "backward_transitive": _against(proposed, published, True, False),
        "forward": _against(proposed, latest, False, True),
        "forward_transitive": _against(proposed, published, False, True),
        "full": _against(proposed, latest, True, True),
        "full_transitive": _against(proposed, published, True, True),
    }
