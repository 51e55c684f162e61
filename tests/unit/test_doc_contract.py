"""The prose agrees with the contract it restates, and the code cites only the repository.

docs/api.md lists the endpoints and states the bounds, limits and error codes that
``schemas/openapi.json`` also carries; the README and docs/architecture.md count and name the
endpoints. Each is checked against the OpenAPI document here, so a new endpoint or a changed
bound fails a test instead of leaving a stale page.

Comments, docstrings, the JSON documents and the docs cite the product's own contract: a section
of docs/api.md by its anchor (``docs/api.md#badge-status``) or a part of the OpenAPI or AsyncAPI
document by its JSON pointer (``schemas/openapi.json#/components/schemas/PostLean``), never a
numbered section of a document the repository does not hold."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.doclinks import ROOT, anchors, prose, tracked_files

API_MD = ROOT / "docs" / "api.md"
OPENAPI = json.loads((ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8"))
ASYNCAPI = json.loads((ROOT / "schemas" / "asyncapi.json").read_text(encoding="utf-8"))
PATHS = set(OPENAPI["paths"])
NUMBERS = {
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
}


def number(text: str) -> int:
    return int(text.replace(",", ""))


def section(path: Path, heading: str) -> str:
    """The prose of one ``## heading`` of a markdown file, up to the next ``## ``."""
    text = prose(path)
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def paragraphs(path: Path) -> list[str]:
    """Paragraphs and list items, each as one string."""
    blocks = re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.) )", prose(path))
    return [" ".join(block.split()) for block in blocks]


# ------------------------------------------------------------------------------ the endpoints


def test_api_md_lists_every_operation_of_the_documents():
    rows = re.findall(
        r"^\| (GET|POST|PUT|PATCH|DELETE|WebSocket) \| `([^`]+)` \| (.+?) \|$", section(API_MD, "Endpoints"), re.M
    )
    listed = {(method, path): operation.strip("`") for method, path, operation in rows if method != "WebSocket"}
    operations = {
        (method.upper(), path): op["operationId"]
        for path, ops in OPENAPI["paths"].items()
        for method, op in ops.items()
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert listed == operations
    stream = [path for method, path, _ in rows if method == "WebSocket"]
    assert stream == [channel["address"] for channel in ASYNCAPI["channels"].values()]


@pytest.mark.parametrize("name", ["README.md", "docs/architecture.md"])
def test_the_endpoint_count_and_list_come_from_the_openapi_document(name: str):
    """Each sentence that counts the HTTP endpoints says how many the OpenAPI document has,
    and names every one of them."""
    count = re.compile(rf"\b({'|'.join(NUMBERS)}|\d+) (?:HTTP )?endpoints\b", re.IGNORECASE)
    counted = [block for block in paragraphs(ROOT / name) if count.search(block)]
    assert counted, f"{name} no longer counts the endpoints: update this test"
    for block in counted:
        for word in count.findall(block):
            said = NUMBERS.get(word.lower()) or int(word)
            assert said == len(PATHS), f"{name}: '{word} endpoints', the document has {len(PATHS)}"
        named = set(re.findall(r"`(/[^`]*)`", block)) - {"/stream"}
        assert named == PATHS, f"{name} names {sorted(named)}, the document has {sorted(PATHS)}"


# ---------------------------------------------------------------- bounds, limits, error codes


def parameter(name: str) -> dict:
    return OPENAPI["components"]["parameters"][name]["schema"]


def test_api_md_states_the_bounds_of_the_parameters_as_the_document_does():
    text = " ".join(prose(API_MD).split())
    low, high, default = re.search(r"`limit`: (\d+)–(\d+), default (\d+)", text).groups()
    limit = parameter("limit")
    assert (int(low), int(high), int(default)) == (limit["minimum"], limit["maximum"], limit["default"])
    low, high = re.search(r"`q` is required, (\d+)–(\d+) characters after trimming", text).groups()
    q = OPENAPI["components"]["parameters"]["q"]
    # The minimum is after trimming, so the schema says it in words (and a pattern), not minLength.
    assert int(high) == q["schema"]["maxLength"]
    assert f"at least {low} characters after trimming" in q["description"]
    low, high = re.search(r"`importance_min`: (\d+)–(\d+)", text).groups()
    importance = parameter("importance_min")
    assert (int(low), int(high)) == (importance["minimum"], importance["maximum"])
    items = int(re.search(r"More than (\d+) items get 422", text).group(1))
    for csv in ("category", "ticker", "hashtag", "sentiment"):
        assert parameter(csv)["maxItems"] == items, csv


def test_api_md_states_the_limits_and_compression_as_the_document_does():
    text = " ".join(prose(API_MD).split())
    described = OPENAPI["info"]["description"]
    minute, day = re.search(r"Limits: ([\d,]+) per minute and ([\d,]+) per UTC day by default", text).groups()
    assert re.search(rf"Defaults are {number(minute)} requests per minute and {number(day)} per UTC day", described)
    policy = f'"minute";q={number(minute)};w=60, "day";q={number(day)};w=86400'
    assert policy in text and policy in described
    low, high = re.search(r"`X-Request-Id` is taken from the request when it is (\d+)–(\d+) characters", text).groups()
    assert f"`X-Request-Id` ({low} to {high} characters" in described
    threshold = re.search(r"at least ([\d,]+) bytes goes out with `Content-Encoding: gzip`", text).group(1)
    assert f"at least {number(threshold)} bytes" in described
    languages = re.search(r"`/languages` carries `Cache-Control: ([^`]+)`", text).group(1)
    assert f"Cache-Control: {languages}" in OPENAPI["paths"]["/languages"]["get"]["description"]
    assert f"{languages} on /languages" in OPENAPI["components"]["headers"]["Cache-Control"]["description"]
    listed = int(re.search(r"at most (\d+) by the platform's rule", text).group(1))
    assert f"At most {listed} locales" in OPENAPI["paths"]["/languages"]["get"]["description"]


def test_every_error_code_of_api_md_is_in_the_documents_and_back():
    text = " ".join(prose(API_MD).split())
    named = set(re.findall(r"\b[1-5]\d\d `([A-Z_]+)`", text))
    closed = set(OPENAPI["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"])
    stream = set(re.findall(r"\b[A-Z][A-Z_]{4,}\b", json.dumps(ASYNCAPI)))
    assert named - closed - stream == set(), "codes of docs/api.md that neither document has"
    assert closed - named == set(), "codes of the OpenAPI document that docs/api.md does not state with their status"


#: Where X-Log-Position and a pushed post's log_position meet a reader: each links to the one
#: statement of how they compare instead of stating it again.
LOG_POSITION_READERS = [
    "schemas/openapi.json",
    "schemas/asyncapi.json",
    "docs/operations.md",
    "services/api/freshness.py",
    "clients/python/README.md",
    "clients/typescript/README.md",
]


def test_how_the_two_log_positions_compare_is_stated_once_and_linked():
    stated = section(API_MD, "Consistency mark (the same format on HTTP and the stream)")
    assert 'id="log-positions"' in stated and "`X-Min-Log-Position: p:(o+1)`" in stated
    for name in LOG_POSITION_READERS:
        assert "api.md#log-positions" in (ROOT / name).read_text(encoding="utf-8"), name
    header = OPENAPI["components"]["headers"]["X-Log-Position"]["description"]
    assert "greater than" not in header and "greater than" not in json.dumps(ASYNCAPI)


# ----------------------------------------------------------------------- citations in the code

#: A numbered section or rule of an outside specification: "spec 2.4", "spec-7 envelope",
#: "spec section 6", "the specification's 3.2", "(section 6, rule 3)".
OUTSIDE = re.compile(
    r"\bspec(?:ification)?(?:'s)?[ -]?(?:section |§ ?|rule )?\d|\(section \d+(?:\.\d+)?(?:, rule \d+)?\)",
    re.IGNORECASE,
)
#: A citation of the repository's own contract.
CITATION = re.compile(r"(docs/[\w.-]+\.md)#([\w-]+)|(schemas/(?:openapi|asyncapi)\.json)#(/[\w/{}.-]*\w)")
TEXT_SUFFIXES = {".py", ".md", ".json", ".ts", ".mjs", ".js", ".sql", ".yaml", ".yml", ".toml", ".txt"}


def repository_text() -> list[tuple[str, str]]:
    return [
        (name, (ROOT / name).read_text(encoding="utf-8"))
        for name in tracked_files()
        if Path(name).suffix in TEXT_SUFFIXES and (ROOT / name).is_file() and not name.endswith("-lock.json")
    ]


def test_nothing_cites_a_numbered_section_of_an_outside_document():
    """The equivalent of ``grep -rnE "spec[ -]?[0-9]" services schemas clients devstack``, over
    every text file of the repository (docs and tests too), and a little wider."""
    found = [
        f"{name}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}"
        for name, text in repository_text()
        if name != "tests/unit/test_doc_contract.py"
        for match in OUTSIDE.finditer(text)
    ]
    assert found == [], "cite docs/api.md#<anchor> or the OpenAPI/AsyncAPI document instead:\n" + "\n".join(found)


def pointer(document: dict, path: str) -> bool:
    node: object = document
    for part in path.strip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def broken_citations() -> list[str]:
    documents = {"schemas/openapi.json": OPENAPI, "schemas/asyncapi.json": ASYNCAPI}
    broken = []
    for name, text in repository_text():
        if name == "tests/unit/test_doc_contract.py":
            continue  # its probes are broken on purpose
        for match in CITATION.finditer(text):
            doc, anchor, schema, path = match.groups()
            line = text.count("\n", 0, match.start()) + 1
            if doc and (not (ROOT / doc).is_file() or anchor not in anchors(ROOT / doc)):
                broken.append(f"{name}:{line}: {match.group(0)}")
            elif schema and not pointer(documents[schema], path):
                broken.append(f"{name}:{line}: {match.group(0)}")
    return broken


def test_every_citation_of_the_contract_resolves():
    """``docs/api.md#anchor`` names an anchor of that page; ``schemas/openapi.json#/...`` a part
    of that document."""
    cited = [match for _, text in repository_text() for match in CITATION.finditer(text)]
    assert len(cited) >= 20, "the code cites its contract by these forms; did the form change?"
    assert broken_citations() == []


def test_a_stale_citation_is_found(tmp_path: Path):
    probe = "docs/api.md#no-such-anchor schemas/openapi.json#/components/schemas/NoSuchSchema spec 2.4"
    assert [m.group(0) for m in CITATION.finditer(probe)] == [
        "docs/api.md#no-such-anchor",
        "schemas/openapi.json#/components/schemas/NoSuchSchema",
    ]
    assert "no-such-anchor" not in anchors(API_MD)
    assert not pointer(OPENAPI, "/components/schemas/NoSuchSchema")
    assert pointer(OPENAPI, "/components/schemas/PostLean")
    assert [m.group(0) for m in OUTSIDE.finditer(probe + " spec-7 envelope (section 6, rule 3)")] == [
        "spec 2",
        "spec-7",
        "(section 6, rule 3)",
    ]
