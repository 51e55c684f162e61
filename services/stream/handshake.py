"""The first step of a stream handshake: is it a well-formed request at all?

Runs before the key and the gates are looked at. A malformed request gets 400
``VALIDATION_FAILED`` with the JSON envelope and is not upgraded: a header that is not UTF-8,
or a WebSocket upgrade (``Upgrade: websocket``) whose ``Sec-WebSocket-Version`` is not 13 or
whose ``Sec-WebSocket-Key`` is not the base64 of 16 bytes (RFC 6455 4.1). A request without
``Upgrade: websocket`` passes: the gates then decide (401, 403, ... or 426 with a valid key).
"""

from __future__ import annotations

import base64
import binascii
from typing import Mapping

from aiohttp import web

from ..common.http.envelope import envelope
from ..common.http.headers import undecodable_header

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
