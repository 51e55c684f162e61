"""Reading a stream handshake, before anything is granted: is it a well-formed request at all,
and what does it ask for (its key, its filter, its resume cursor)?

Runs before the key and the gates are looked at. A malformed request gets 400
``VALIDATION_FAILED`` with the JSON envelope and is not upgraded: a header that is not UTF-8,
or a WebSocket upgrade (``Upgrade: websocket``) whose ``Sec-WebSocket-Version`` is not 13 or
whose ``Sec-WebSocket-Key`` is not the base64 of 16 bytes (RFC 6455 4.1). A request without
``Upgrade: websocket`` passes: the gates then decide (401, 403, ... or 426 with a valid key).
Once the gates let the key through, a filter or a resume cursor that breaks its grammar gets
422 ``VALIDATION_FAILED`` (:func:`requested_filter`, :func:`requested_resume`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Mapping

from aiohttp import web

from ..common.http.envelope import envelope
from ..common.http.headers import undecodable_header
from ..common.http.keys import authorization, bearer_key
from ..common.runtime.errors import InvalidParameter
from ..readmodel import cursors
from ..readmodel.filters import AnnouncementFilter, parse_filter

WEBSOCKET_VERSION = "13"


def _bad(message: str, headers: dict[str, str] | None = None) -> web.Response:
    return envelope(400, "VALIDATION_FAILED", message, headers=headers)


def _key_ok(key: str | None) -> bool:
    if key is None:
        return False
    try:
        return len(base64.b64decode(key.strip(), validate=True)) == 16
    except (binascii.Error, ValueError):
        return False


def handshake_error(headers: Mapping[str, str]) -> web.Response | None:
    """A 400 response for a malformed handshake, else None."""
    bad = undecodable_header(headers.items())
    if bad is not None:
        return _bad(f"The {bad} header is not valid UTF-8.")
    if headers.get("Upgrade", "").strip().lower() != "websocket":
        return None
    if headers.get("Sec-WebSocket-Version", "").strip() != WEBSOCKET_VERSION:
        return _bad(
            "Unsupported Sec-WebSocket-Version: this server speaks WebSocket version 13.",
            headers={"Sec-WebSocket-Version": WEBSOCKET_VERSION},
        )
    if not _key_ok(headers.get("Sec-WebSocket-Key")):
        return _bad("Sec-WebSocket-Key must be the base64 encoding of 16 bytes.")
    return None


def presented_key(request: web.Request) -> str | None:
    """The key of the handshake: the ``key`` query parameter (docs/api.md#stream-key) when it is non-empty, else
    an ``Authorization: Bearer <key>`` header, as on HTTP. Either way the same gates apply."""
    return request.query.get("key") or bearer_key(authorization(request.headers))


def requested_filter(query: Mapping[str, str]) -> AnnouncementFilter | web.Response:
    """The connection's opt-in filter, or the 422 refusing a value that breaks the grammar."""
    try:
        return parse_filter(query)
    except InvalidParameter as exc:
        return envelope(422, "VALIDATION_FAILED", exc.message, field=exc.field)


def requested_resume(query: Mapping[str, str]) -> tuple[bool, cursors.Cursor | None] | web.Response:
    """The cursor opt-in (``cursors=true``, or a ``resume`` cursor) and the cursor to resume
    from, or the 422 refusing a ``resume`` that is not a cursor."""
    token = query.get("resume")
    if token is not None:  # an empty one is not a cursor either
        try:
            return True, cursors.decode(token)
        except cursors.InvalidCursor:
            return envelope(
                422,
                "VALIDATION_FAILED",
                "resume must be a cursor token from this stream (ready or "
                f"post.created cursor) or GET /changes; got {token[:40]!r}.",
                field="resume",
            )
    flag = query.get("cursors", "").lower()
    if flag not in ("", "true", "1", "false", "0"):
        return envelope(422, "VALIDATION_FAILED", f"cursors must be true or false; got {flag[:40]!r}.", field="cursors")
    return flag in ("true", "1"), None
