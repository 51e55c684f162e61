"""Writes the language-neutral JSON Schema files of the event contract from the models."""

from __future__ import annotations

from pathlib import Path

import orjson

from .models import EVENT_MODELS

EVENTS_DIR = Path(__file__).parent / "events"


def event_schema(kind: str) -> dict:
    model = EVENT_MODELS[kind]
    schema = model.model_json_schema(mode="validation")
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://schemas.tickerwire.example/events/{kind}.v1.json",
        **schema,
    }
    return schema


def render(kind: str) -> bytes:
    return orjson.dumps(event_schema(kind), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def export_all(folder: Path | None = None) -> list[Path]:
    folder = folder or EVENTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in EVENT_MODELS:
        path = folder / f"{kind}.v1.schema.json"
        path.write_bytes(render(kind))
        written.append(path)
    return written
