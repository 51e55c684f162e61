"""Spans out of OTLP JSON (the collector's file exporter: one ``{"resourceSpans": [...]}`` a
line), flattened into one dict a span for tests to assert on.

A span's dict: ``service`` (the resource's ``service.name``), ``resource`` (all of its
attributes), ``scope``, ``name``, ``kind`` (``INTERNAL``, ``SERVER``, ``CLIENT``, ``PRODUCER``,
``CONSUMER``), ``trace_id``, ``span_id``, ``parent_span_id`` (None for a root), ``trace_state``,
``links`` (each ``{"trace_id", "span_id", "trace_state", "attributes"}``), ``attributes``,
``status`` (``UNSET``, ``OK``, ``ERROR``), ``start_ns``, ``end_ns``. Attribute values are Python
values: str, int, float, bool, bytes (base64 in OTLP JSON), lists and dicts.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Iterable

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUSES = {0: "UNSET", 1: "OK", 2: "ERROR"}


def parse_lines(lines: Iterable[str]) -> list[dict]:
    """Every span of the OTLP JSON lines, in the order received. Blank lines are skipped."""
    spans: list[dict] = []
    for line in lines:
        if line.strip():
            spans.extend(flatten(json.loads(line)))
    return spans


def flatten(export: dict) -> list[dict]:
    """The spans of one OTLP JSON export request (``{"resourceSpans": [...]}``)."""
    spans = []
    for resource_spans in export.get("resourceSpans", ()):
        resource = attributes(resource_spans.get("resource", {}).get("attributes", ()))
        for scope_spans in resource_spans.get("scopeSpans", ()):
            scope = scope_spans.get("scope", {}).get("name", "")
            for span in scope_spans.get("spans", ()):
                spans.append(_span(span, resource, scope))
    return spans


def _span(span: dict, resource: dict, scope: str) -> dict:
    return {
        "service": resource.get("service.name"),
        "resource": resource,
        "scope": scope,
        "name": span.get("name", ""),
        "kind": KINDS.get(_enum(span.get("kind", 0)), str(span.get("kind"))),
        "trace_id": span.get("traceId", ""),
        "span_id": span.get("spanId", ""),
        "parent_span_id": span.get("parentSpanId") or None,
        "trace_state": span.get("traceState", ""),
        "links": [
            {
                "trace_id": link.get("traceId", ""),
                "span_id": link.get("spanId", ""),
                "trace_state": link.get("traceState", ""),
                "attributes": attributes(link.get("attributes", ())),
            }
            for link in span.get("links", ())
        ],
        "attributes": attributes(span.get("attributes", ())),
        "status": STATUSES.get(_enum(span.get("status", {}).get("code", 0)), "UNSET"),
        "start_ns": int(span.get("startTimeUnixNano", 0)),
        "end_ns": int(span.get("endTimeUnixNano", 0)),
    }


def _enum(value: Any) -> int:
    """An OTLP JSON enum: an integer, or its name (``SPAN_KIND_SERVER``, ``STATUS_CODE_OK``)."""
    if isinstance(value, int):
        return value
    names = {f"SPAN_KIND_{name}": n for n, name in KINDS.items()} | {f"STATUS_CODE_{s}": n for n, s in STATUSES.items()}
    return names.get(str(value), -1)


def attributes(pairs: Iterable[dict]) -> dict[str, Any]:
    """OTLP ``KeyValue``s as a dict."""
    return {pair["key"]: value(pair.get("value", {})) for pair in pairs}


def value(any_value: dict) -> Any:
    """An OTLP ``AnyValue`` as a Python value (int64s come as strings in OTLP JSON)."""
    if "stringValue" in any_value:
        return any_value["stringValue"]
    if "boolValue" in any_value:
        return bool(any_value["boolValue"])
    if "intValue" in any_value:
        return int(any_value["intValue"])
    if "doubleValue" in any_value:
        return float(any_value["doubleValue"])
    if "bytesValue" in any_value:
        return base64.b64decode(any_value["bytesValue"])
    if "arrayValue" in any_value:
        return [value(v) for v in any_value["arrayValue"].get("values", ())]
    if "kvlistValue" in any_value:
        return attributes(any_value["kvlistValue"].get("values", ()))
    return None
