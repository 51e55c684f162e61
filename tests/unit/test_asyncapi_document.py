"""The AsyncAPI document describes what the stream really does: both ways of sending the key,
the opt-in filters the handshake parses, and the post.created message as encoded."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import orjson

from tickerwire.services.readmodel import cursors
from tickerwire.services.readmodel.filters import EVERYTHING, parse_filter
from tickerwire.services.stream import protocol

DOC = orjson.loads((Path(__file__).resolve().parents[2] / "schemas" / "asyncapi.json").read_bytes())


def test_both_key_carriers_are_security_schemes_of_the_server():
    schemes = DOC["components"]["securitySchemes"]
    assert {(s["type"], s.get("in"), s.get("name"), s.get("scheme")) for s in schemes.values()} == {
        ("httpApiKey", "query", "key", None),
        ("http", None, None, "bearer"),
    }
    refs = {r["$ref"].rsplit("/", 1)[1] for r in DOC["servers"]["production"]["security"]}
    assert refs == set(schemes)


def test_the_documented_filters_are_the_ones_the_handshake_reads():
    query = DOC["channels"]["stream"]["bindings"]["ws"]["query"]["properties"]
    filters = set(query) - {"key", "cursors", "resume"}
    assert filters == {"lang", "tickers", "categories"}
    assert parse_filter({}) == EVERYTHING
    assert all(parse_filter({name: "X"}) != EVERYTHING for name in filters)
    assert "Authorization" in DOC["channels"]["stream"]["bindings"]["ws"]["headers"]["properties"]


def test_an_encoded_post_created_and_the_example_validate_against_the_message_schema():
    schemas = DOC["components"]["schemas"]
    validator = jsonschema.Draft202012Validator(
        {**schemas["PostCreated"], "components": DOC["components"]}, format_checker=jsonschema.FormatChecker()
    )
    example = DOC["components"]["messages"]["postCreated"]["examples"][0]["payload"]
    message = orjson.loads(protocol.post_created(orjson.dumps(example["data"]).decode(), 3, 1523))
    for payload in (example, message):
        assert not [e.message for e in validator.iter_errors(payload)]
    assert message["log_position"] == "3:1523" and "log_position" in schemas["PostCreated"]["required"]


def test_the_cursor_opt_ins_and_their_messages_validate_against_the_message_schemas():
    schemas = DOC["components"]["schemas"]
    assert {"cursors", "resume"} <= set(DOC["channels"]["stream"]["bindings"]["ws"]["query"]["properties"])

    def errors(schema: str, payload: dict) -> list[str]:
        validator = jsonschema.Draft202012Validator(
            {**schemas[schema], "components": DOC["components"]}, format_checker=jsonschema.FormatChecker()
        )
        return [e.message for e in validator.iter_errors(payload)]

    cursor = cursors.encode("a1b2c3", {0: (12, "en-US"), 1: (7, "")})
    sent = [
        ("Ready", protocol.ready("ses_x")),
        ("Ready", protocol.ready("ses_x", cursor)),
        ("Ready", protocol.ready("ses_x", cursor, True)),
        (
            "Ready",
            protocol.ready("ses_x", cursor, False, (cursors.EPOCH_CHANGED, cursors.EPOCH_CHANGED_MESSAGE)),
        ),
        (
            "Ready",
            protocol.ready("ses_x", cursor, False, (cursors.NOT_ISSUED, cursors.NOT_ISSUED_MESSAGE.format(why="past"))),
        ),
        ("PostCreated", protocol.post_created('{"id":1}', 0, 12, cursor)),
    ]
    for schema, message in sent:
        payload = orjson.loads(message)
        if schema == "PostCreated":  # the lean post as the example has it
            payload["data"] = DOC["components"]["messages"]["postCreated"]["examples"][0]["payload"]["data"]
        assert not errors(schema, payload), (schema, payload)
    for name, schema in (("ready", "Ready"), ("postCreated", "PostCreated")):
        for example in DOC["components"]["messages"][name]["examples"]:
            assert not errors(schema, example["payload"])
    assert errors("Ready", {**orjson.loads(protocol.ready("ses_x")), "cursor": "not a cursor"})
