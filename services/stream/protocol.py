"""Stream messages (spec 6), each encoded once into the bytes of one JSON text frame."""

from __future__ import annotations

from datetime import datetime, timezone

import orjson

from tickerwire.schemas.readmodel import iso_utc


def _now() -> str:
    return iso_utc(datetime.now(timezone.utc))


def ready(session_id: str) -> bytes:
    return orjson.dumps({"type": "ready", "ts": _now(), "session_id": session_id})


def ping() -> bytes:
    return orjson.dumps({"type": "ping", "ts": _now()})


def post_created(lean_json: str) -> bytes:
    """``data`` is the stored lean JSON, byte for byte the item GET /posts lists."""
    return b'{"type":"post.created","ts":"' + _now().encode() + b'","data":' + lean_json.encode() + b"}"
