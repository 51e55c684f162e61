"""The OpenAPI document as partner tooling reads it: tags per resource, an example for every
response (each valid against its schema), open sets marked as open, and the limit and
consistency headers declared wherever the API sends them."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import orjson
import pytest

DOC = orjson.loads((Path(__file__).resolve().parents[2] / "schemas" / "openapi.json").read_bytes())
COMPONENTS = DOC["components"]


def resolve(obj: dict) -> dict:
    while "$ref" in obj:
        section, name = obj["$ref"].split("/")[-2:]
        obj = COMPONENTS[section][name]
    return obj


OPERATIONS = [(path, op) for path, item in DOC["paths"].items() for op in item.values()]
RESPONSES = [
    (f"{op['operationId']} {status}", resolve(r)) for _, op in OPERATIONS for status, r in op["responses"].items()
]


def test_every_operation_has_one_declared_resource_tag():
    declared = [t["name"] for t in DOC["tags"]]
    assert len(declared) == len(set(declared)) and all(t.get("description") for t in DOC["tags"])
    for _, op in OPERATIONS:
        assert len(op["tags"]) == 1 and op["tags"][0] in declared, op["operationId"]
    assert {op["tags"][0] for _, op in OPERATIONS} == set(declared)  # no empty tag


@pytest.mark.parametrize(("name", "response"), RESPONSES, ids=[n for n, _ in RESPONSES])
def test_every_response_has_examples_valid_against_its_schema(name, response):
    content = response.get("content", {}).get("application/json")
    if content is None:  # 304: no body; its headers carry the examples
        assert response["headers"] and all("example" in resolve(h) for h in response["headers"].values())
        return
    examples = content.get("examples")
    assert examples, name
    validator = jsonschema.Draft202012Validator(
        {**content["schema"], "components": COMPONENTS}, format_checker=jsonschema.FormatChecker()
    )
    for example_name, example in examples.items():
        errors = [e.message for e in validator.iter_errors(example["value"])]
        assert not errors, (name, example_name, errors[:3])
    for header in response.get("headers", {}).values():
        assert "example" in resolve(header), name


@pytest.mark.parametrize("schema", ["Token", "TokenDetail"])
def test_sets_that_grow_with_the_data_are_open(schema):
    props = COMPONENTS["schemas"][schema]["properties"]
    listing = props["exchange_listings"]["items"]
    ecosystem = props["primary_ecosystem"]["oneOf"][0]["properties"]["slug"]
    for field in (listing, ecosystem):
        assert "enum" not in field and field["x-extensible-enum"] and "may grow" in field["description"]
    validator = jsonschema.Draft202012Validator({**COMPONENTS["schemas"][schema], "components": COMPONENTS})
    example = resolve(
        next(op for _, op in OPERATIONS if op["operationId"] == ("listTokens" if schema == "Token" else "getToken"))[
            "responses"
        ]["200"]
    )
    value = next(iter(example["content"]["application/json"]["examples"].values()))["value"]
    token = value["tokens"][0] if schema == "Token" else value
    grown = {
        **token,
        "exchange_listings": ["newexchange"],
        "primary_ecosystem": {"slug": "ecosystems-newchain", "name": "New"},
    }
    assert validator.is_valid(
        grown
    )  # a new exchange or ecosystem does not break a client validating against the document


def test_counted_responses_declare_the_limit_headers_and_the_mark():
    for name, response in RESPONSES:
        headers = set(response.get("headers", {}))
        if "X-RateLimit-Limit" in headers:
            assert {"RateLimit", "RateLimit-Policy"} <= headers, name
            assert ("X-Log-Position" in headers) == (not name.endswith(" 429")), name
    assert resolve({"$ref": "#/components/responses/NotModified"})["headers"].keys() >= {"RateLimit", "X-Log-Position"}


def test_every_operation_takes_x_min_log_position_with_its_refusals():
    """The API reads X-Min-Log-Position on every partner route, before the handler
    (services/api/freshness.py): each operation declares it, the 422 of a malformed value, the
    503 of one no data is fresh enough for yet, and the 400 of a header that is not UTF-8."""
    header = resolve({"$ref": "#/components/parameters/min_log_position"})
    assert (header["name"], header["in"], header["required"]) == ("X-Min-Log-Position", "header", False)
    assert "docs/api.md#log-positions" in header["description"]
    for _, op in OPERATIONS:
        assert {"$ref": "#/components/parameters/min_log_position"} in op["parameters"], op["operationId"]
        assert {"400", "422", "503"} <= set(op["responses"]), op["operationId"]
    examples = resolve({"$ref": "#/components/responses/ValidationFailed"})["content"]["application/json"]["examples"]
    assert examples["min_log_position"]["value"]["error"]["field"] == "X-Min-Log-Position"
