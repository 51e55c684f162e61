"""Writes the language-neutral JSON Schema files of the event contract from the models: one
file per event type and ``schema_version``, ``events/<type>.v<version>.schema.json``."""

from __future__ import annotations

from pathlib import Path

import orjson

from .models import EVENT_VERSIONS, SCHEMA_VERSION

EVENTS_DIR = Path(__file__).parent / "events"


def file_name(kind: str, version: int = SCHEMA_VERSION) -> str:
    """The name of the published schema file of one version of an event type."""
    return f"{kind}.v{version}.schema.json"


def event_schema(kind: str, version: int = SCHEMA_VERSION) -> dict:
    model = EVENT_VERSIONS[kind][version]
    schema = model.model_json_schema(mode="validation")
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://schemas.tickerwire.example/events/{kind}.v{version}.json",
        **schema,
    }
    return schema


def render(kind: str, version: int = SCHEMA_VERSION) -> bytes:
    return orjson.dumps(event_schema(kind, version), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def export_all(folder: Path | None = None) -> list[Path]:
    folder = folder or EVENTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, versions in EVENT_VERSIONS.items():
        for version in versions:
            path = folder / file_name(kind, version)
            path.write_bytes(render(kind, version))
            written.append(path)
    return written
