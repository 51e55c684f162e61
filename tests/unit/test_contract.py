"""The JSON Schema files and the pydantic models are one contract: same files, same verdicts."""

import copy
from pathlib import Path

import jsonschema
import orjson
import pytest

from tickerwire.schemas.export import EVENTS_DIR, event_schema, file_name, render
from tickerwire.schemas.models import EVENT_MODELS, EVENT_VERSIONS, InvalidEvent, decode_event

EXAMPLES = Path(__file__).parents[2] / "schemas" / "examples" / "events.jsonl"


def examples():
    return [orjson.loads(line) for line in EXAMPLES.read_bytes().splitlines() if line.strip()]


VERSIONS = [(kind, version) for kind, versions in EVENT_VERSIONS.items() for version in versions]


@pytest.mark.parametrize("kind,version", VERSIONS)
def test_committed_schema_files_equal_the_models(kind, version):
    assert (EVENTS_DIR / file_name(kind, version)).read_bytes() == render(kind, version), (
        "run `tickerwire schemas export`"
    )


def test_the_published_files_are_exactly_the_versions():
    assert sorted(p.name for p in EVENTS_DIR.glob("*.schema.json")) == sorted(file_name(k, v) for k, v in VERSIONS)
    assert ("post", 1) in VERSIONS and ("post", 2) in VERSIONS


def test_every_event_version_has_an_example():
    assert {(e["type"], e.get("schema_version", 1)) for e in examples()} == set(VERSIONS)


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
        ("unknown envelope field", lambda d: d.__setitem__("surprise", 1)),
        ("schema_version 3", lambda d: d.__setitem__("schema_version", 3)),
        ("schema_version a string", lambda d: d.__setitem__("schema_version", "2")),
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
    """One of the published versions of the type accepts ``doc``."""
    return any(
        jsonschema.Draft202012Validator(event_schema(doc["type"], version)).is_valid(doc)
        for version in EVENT_VERSIONS[doc["type"]]
    )


def open_data(doc) -> bool:
    """Whether the version's ``data`` is open: unknown fields there are ignored (schemas/README.md#versions)."""
    return doc["type"] == "post" and doc.get("schema_version", 1) == 2


def example_id(doc) -> str:
    return f"{doc['type']}.v{doc.get('schema_version', 1)}"


@pytest.mark.parametrize("doc", examples(), ids=example_id)
def test_both_accept_the_examples(doc):
    assert pydantic_accepts(doc) and schema_accepts(doc)


@pytest.mark.parametrize("doc", examples(), ids=example_id)
def test_both_agree_on_invalid_variants(doc):
    for name, broken in mutations(doc):
        has_default = name.startswith("missing") and name.split(".", 1)[1] in _defaults(doc)
        tolerated = name == "unknown field" and open_data(doc)
        assert pydantic_accepts(broken) == schema_accepts(broken), name
        if not has_default and not tolerated:
            assert not pydantic_accepts(broken), name
        if tolerated:
            assert pydantic_accepts(broken), name


def test_an_unknown_field_is_rejected_in_v1_and_ignored_in_v2():
    v1, v2 = (e for e in examples() if e["type"] == "post")
    for doc in (v1, v2):
        doc["data"]["tickers_v3"] = ["BTC"]
    assert not pydantic_accepts(v1) and not schema_accepts(v1)
    event = decode_event(orjson.dumps(v2))
    assert schema_accepts(v2) and "tickers_v3" not in event.data.model_dump()


def test_an_unknown_schema_version_has_its_own_kind():
    v1 = next(e for e in examples() if e["type"] == "post")
    for version, kind in [(7, "unknown_schema_version"), (True, "schema"), ("1", "schema")]:
        with pytest.raises(InvalidEvent) as err:
            decode_event(orjson.dumps({**v1, "schema_version": version}))
        assert err.value.kind == kind, version
        if version == 7:
            assert "schema_version 7 is not known to this release (known: 1, 2)" in err.value.reason


def test_a_registry_framed_value_decodes_as_its_payload():
    v2 = next(e for e in examples() if e.get("schema_version") == 2)
    framed = b"\x00" + (42).to_bytes(4, "big") + orjson.dumps(v2)
    assert decode_event(framed) == decode_event(orjson.dumps(v2))
    with pytest.raises(InvalidEvent) as err:
        decode_event(b"\x00\x00\x00\x00\x2a" + b"not json")
    assert err.value.kind == "undecodable" and "schema-registry serializer, schema id 42" in err.value.reason


def _defaults(doc):
    data_model = EVENT_VERSIONS[doc["type"]][doc.get("schema_version", 1)].model_fields["data"].annotation
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
        ("workspace", "api_key", "embed", "heartbeat", "webhook_endpoint"),
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
