"""`tickerwire schemas check`: each crafted change of a published schema, and its verdicts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import orjson
import pytest

from tickerwire.schemas.export import event_schema
from tickerwire.services.cli.main import main


def run(tmp_path: Path, capsys, doc: object, *flags: str) -> tuple[int, dict[str, list[str]], str]:
    """Exit status, the printed lines under each mode, and stderr."""
    path = tmp_path / "proposed.schema.json"
    path.write_bytes(orjson.dumps(doc))
    status = main(["schemas", "check", str(path), *flags])
    out, err = capsys.readouterr()
    modes: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines()[1:-1]:
        if line.startswith("  "):
            assert current is not None
            modes[current].append(line.strip())
        else:
            current, verdict = line.split(": ", 1)
            modes[current] = []
            assert verdict == "compatible" or verdict == "incompatible"
    return status, modes, err


def changed(kind: str, version: int, change: Callable[[dict], None]) -> dict:
    doc = copy.deepcopy(event_schema(kind, version))
    change(doc)
    return doc


def post_v2(change: Callable[[dict], None]) -> dict:
    return changed("post", 2, change)


def test_the_published_schemas_are_compatible_with_themselves(tmp_path, capsys):
    for kind, version in [("post", 1), ("token", 1)]:
        status, modes, _ = run(tmp_path, capsys, event_schema(kind, version), "--mode", "full_transitive")
        assert status == 0 and modes == {m: [] for m in modes} and len(modes) == 6, (kind, version)
    # v2 is a new version of v1 (schemas/README.md#versions): compatible with itself, not with v1.
    status, modes, _ = run(tmp_path, capsys, event_schema("post", 2), "--mode", "full")
    assert status == 0 and modes["full"] == [] and modes["full_transitive"]


def test_a_removed_field_of_a_closed_object_breaks_backward(tmp_path, capsys):
    doc = changed("token", 1, lambda d: d["$defs"]["Token"]["properties"].pop("description"))
    doc["$defs"]["Token"]["required"].remove("description")
    status, modes, _ = run(tmp_path, capsys, doc)
    assert status == 1
    assert modes["backward"] == [
        "backward vs token.v1: data.description: written by token.v1, not allowed by proposed (a closed object)"
    ]
    # description is required (nullable) in token.v1: the old reader misses it too
    assert modes["forward"] == ["forward vs token.v1: data.description: required by token.v1, absent in proposed"]


def test_a_removed_required_field_breaks_forward(tmp_path, capsys):
    def drop(d):
        d["$defs"]["PostV2"]["properties"].pop("source")
        d["$defs"]["PostV2"]["required"].remove("source")

    status, modes, _ = run(tmp_path, capsys, post_v2(drop), "--mode", "forward")
    assert status == 1
    assert modes["forward"] == ["forward vs post.v2: data.source: required by post.v2, absent in proposed"]
    assert modes["backward"] == []  # the new reader ignores it in an open object


def test_a_narrowed_type_breaks_backward(tmp_path, capsys):
    doc = post_v2(lambda d: d["$defs"]["TickerMention"]["properties"]["relevance"].update(type="integer"))
    status, modes, _ = run(tmp_path, capsys, doc, "--mode", "backward")
    assert status == 1
    assert modes["backward"] == ["backward vs post.v2: data.tickers[].relevance: type number narrowed to integer"]
    assert modes["forward"] == []


def test_a_new_required_field_breaks_backward(tmp_path, capsys):
    def add(d):
        d["$defs"]["PostV2"]["properties"]["region"] = {"type": "string"}
        d["$defs"]["PostV2"]["required"].append("region")

    status, modes, _ = run(tmp_path, capsys, post_v2(add))
    assert status == 1
    assert modes["backward"] == ["backward vs post.v2: data.region: required by proposed, absent in post.v2"]
    assert modes["full"] == modes["backward"]


def test_a_removed_enum_value_breaks_backward(tmp_path, capsys):
    doc = post_v2(lambda d: d["$defs"]["PostStatus"]["enum"].remove("retracted"))
    status, modes, _ = run(tmp_path, capsys, doc)
    assert status == 1
    assert modes["backward"] == [
        "backward vs post.v2: data.status: value 'retracted' removed (the reader reads 'draft', 'queued', "
        "'publishing', 'published', 'partial', 'failed')"
    ]


def test_a_lowered_bound_breaks_backward_and_a_raised_one_forward(tmp_path, capsys):
    lower = post_v2(lambda d: d["$defs"]["PostV2"]["properties"]["importance"].update(maximum=50))
    status, modes, _ = run(tmp_path, capsys, lower)
    assert status == 1 and modes["backward"] == ["backward vs post.v2: data.importance: maximum 100 lowered to 50"]
    raise_ = post_v2(lambda d: d["$defs"]["PostV2"]["properties"]["importance"].update(maximum=1000))
    status, modes, _ = run(tmp_path, capsys, raise_)
    assert status == 1 and modes["forward"] == ["forward vs post.v2: data.importance: maximum 1000 lowered to 100"]


def test_a_new_optional_field_in_an_open_object_is_compatible(tmp_path, capsys):
    doc = post_v2(lambda d: d["$defs"]["Source"]["properties"].update(name={"type": "string", "maxLength": 200}))
    status, modes, _ = run(tmp_path, capsys, doc)
    assert status == 0
    assert modes["backward"] == modes["forward"] == modes["full"] == []
    # Transitively, v2 itself is a new version of v1: its differences are listed, not hidden.
    assert any(line.startswith("forward vs post.v1: data.source_url") for line in modes["full_transitive"])


def test_the_same_schema_written_differently_is_compatible(tmp_path, capsys):
    def inline(d):
        d["$defs"]["PostV2"]["properties"]["source"] = copy.deepcopy(d["$defs"]["Source"]) | {"description": "Moved"}
        d["$defs"]["PostV2"]["properties"]["importance"]["description"] = "How important, 0 to 100"
        d["$defs"]["PostStatus"]["enum"].reverse()
        d["$defs"]["PostV2"]["required"].reverse()

    status, modes, _ = run(tmp_path, capsys, post_v2(inline), "--mode", "full")
    assert status == 0 and all(lines == [] for name, lines in modes.items() if not name.endswith("transitive"))


def test_a_new_optional_field_in_a_closed_object_breaks_forward(tmp_path, capsys):
    doc = changed("token", 1, lambda d: d["$defs"]["Token"]["properties"].update(twitter={"type": "string"}))
    status, modes, _ = run(tmp_path, capsys, doc)
    assert status == 1 and modes["backward"] == []
    assert modes["forward"] == [
        "forward vs token.v1: data.twitter: written by proposed, not allowed by token.v1 (a closed object)"
    ]


@pytest.mark.parametrize(
    "content,message",
    [
        (b"{not json", "is not JSON"),
        (b"[1, 2]", "is not a JSON Schema object"),
        (b'{"type": "object"}', "does not say its event type"),
        (b'{"properties": {"type": {"const": "nope"}}}', "no published schema of event type 'nope'"),
        (b'{"properties": {"type": {"const": "post"}, "data": {"$ref": "#/$defs/Gone"}}}', "cannot resolve $ref"),
    ],
)
def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert main(["schemas", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err, err


def test_a_missing_file_is_one_line_and_status_2(tmp_path, capsys):
    assert main(["schemas", "check", str(tmp_path / "absent.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
