"""The JSON Schema files and the pydantic models are one contract: same files, same verdicts."""

import copy
from pathlib import Path

import jsonschema
import orjson
import pytest

from tickerwire.schemas.export import EVENTS_DIR, event_schema, render
from tickerwire.schemas.models import EVENT_MODELS, InvalidEvent, decode_event

EXAMPLES = Path(__file__).parents[2] / "schemas" / "examples" / "events.jsonl"


def examples():
    return [orjson.loads(line) for line in EXAMPLES.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", sorted(EVENT_MODELS))
def test_committed_schema_files_equal_the_models(kind):
    assert (EVENTS_DIR / f"{kind}.v1.schema.json").read_bytes() == render(kind), "run `tickerwire schemas export`"


def test_every_event_type_has_an_example():
    assert {e["type"] for e in examples()} == set(EVENT_MODELS)


def mutations(doc):
    """Invalid variants of a valid event: each breaks one rule both sides must enforce."""
    out = []
    for field in list(doc["data"]):
        broken = copy.deepcopy(doc)
        del broken["data"][field]
        out.append((f"missing data.{field}", broken))
    for name, change in [
        ("version 0", lambda d: d.__setitem__("version", 0)),
        ("unknown field", lambda d: d["data"].__setitem__("surprise", 1)),
        ("schema_version 2", lambda d: d.__setitem__("schema_version", 2)),
        ("data not an object", lambda d: d.__setitem__("data", [])),
    ]:
        broken = copy.deepcopy(doc)
        change(broken)
        out.append((name, broken))
    return out


def pydantic_accepts(doc) -> bool:
    try:
        decode_event(orjson.dumps(doc))
        return True
    except InvalidEvent:
        return False


def schema_accepts(doc) -> bool:
    return jsonschema.Draft202012Validator(event_schema(doc["type"])).is_valid(doc)


@pytest.mark.parametrize("doc", examples(), ids=lambda d: d["type"])
def test_both_accept_the_examples(doc):
    assert pydantic_accepts(doc) and schema_accepts(doc)


@pytest.mark.parametrize("doc", examples(), ids=lambda d: d["type"])
def test_both_agree_on_invalid_variants(doc):
    for name, broken in mutations(doc):
        has_default = name.startswith("missing") and name.split(".", 1)[1] in _defaults(doc["type"])
        assert pydantic_accepts(broken) == schema_accepts(broken), name
        if not has_default:
            assert not pydantic_accepts(broken), name


def _defaults(kind):
    data_model = EVENT_MODELS[kind].model_fields["data"].annotation
    return {n for n, f in data_model.model_fields.items() if not f.is_required()}


def test_unknown_type_and_garbage_are_rejected_with_a_kind():
    with pytest.raises(InvalidEvent) as e1:
        decode_event(b'{"type": "nope"}')
    assert e1.value.kind == "unknown_type"
    with pytest.raises(InvalidEvent) as e2:
        decode_event(b"\xff\xfe")
    assert e2.value.kind == "undecodable"


def test_timestamps_without_offset_are_rejected():
    doc = examples()[0]
    doc["emitted_at"] = "2026-11-01T00:00:00"
    assert not pydantic_accepts(doc)


def test_the_registry_derives_keys_and_topics_from_each_declaration():
    from tickerwire.schemas.models import entity_key, event_types, topic_for_event_type
    from tickerwire.schemas.topics import ACCESS, ALL_TOPICS, CATALOG, POSTS

    assert [event_types(t) for t in ALL_TOPICS] == [
        ("post",),
        ("token", "category", "locale"),
        ("workspace", "api_key", "embed", "heartbeat"),
    ]
    assert topic_for_event_type("tw", "heartbeat") == "tw.access.v1" and (POSTS, CATALOG, ACCESS) == ALL_TOPICS
    keys = {e["type"]: entity_key(decode_event(orjson.dumps(e))) for e in examples()}
    ids = {
        e["type"]: e["data"][
            {"token": "ticker", "category": "slug", "locale": "code", "heartbeat": "embed_id"}.get(e["type"], "id")
        ]
        for e in examples()
    }
    assert keys == {kind: f"{kind}:{ids[kind]}" for kind in EVENT_MODELS}
