"""The ``post.created`` message (docs/api.md#stream-messages), byte for byte what the stream
pushes and a webhook endpoint receives as its body (docs/webhooks.md)."""

from __future__ import annotations

from datetime import datetime, timezone

import orjson

from .logposition import record_text
from .mapping import iso_utc


def _now() -> str:
    return iso_utc(datetime.now(timezone.utc))


def post_created(lean_json: str, partition: int, offset: int, cursor: str | None = None) -> bytes:
    """``data`` is the stored lean JSON, byte for byte the item GET /posts lists.

    ``log_position`` names the posts-topic record that announced the post
    (:func:`.logposition.record_text`; how a read is known to reflect it:
    docs/api.md#log-positions). ``cursor`` (connections that opted in to cursors): the resume
    cursor just after this message.
    """
    return (
        b'{"type":"post.created","ts":"'
        + _now().encode()
        + b'","log_position":"'
        + record_text(partition, offset).encode()
        + (b'","cursor":"' + cursor.encode() if cursor is not None else b"")
        + b'","data":'
        + lean_json.encode()
        + b"}"
    )


def webhook_test(endpoint_id: str) -> bytes:
    """The ``webhook.test`` message (docs/webhooks.md#test-events): no post, no cursor."""
    return (
        b'{"type":"webhook.test","ts":"'
        + _now().encode()
        + b'","data":{"endpoint_id":'
        + orjson.dumps(endpoint_id)
        + b"}}"
    )
