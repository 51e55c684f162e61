"""The spec-7 JSON error envelope for everything the stream process answers over HTTP:
refused handshakes, unknown routes, wrong methods and failures of our own."""

from __future__ import annotations

import logging

import orjson
from aiohttp import web

from ..common.errors import TransientError

log = logging.getLogger(__name__)


def envelope(
    status: int,
    code: str,
    message: str,
    *,
    field: str | None = None,
    retry_after_sec: int | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """A JSON error response; a 429 or 503 also carries ``Retry-After``."""
    err: dict[str, object] = {"code": code, "message": message}
    if field is not None:
        err["field"] = field
    out = {"Cache-Control": "no-store", **(headers or {})}
    if retry_after_sec is not None:
        err["retry_after_sec"] = retry_after_sec
        out["Retry-After"] = str(retry_after_sec)
    return web.Response(status=status, body=orjson.dumps({"error": err}), content_type="application/json", headers=out)


_HTTP_CODES = {
    404: ("NOT_FOUND", "No such endpoint. The stream is served at {base}/stream?key=<API_KEY>."),
    405: ("METHOD_NOT_ALLOWED", "The stream accepts only GET (a WebSocket upgrade)."),
    413: ("PAYLOAD_TOO_LARGE", "The request is too large."),
    414: ("URI_TOO_LONG", "The request URI is too long."),
    431: ("HEADERS_TOO_LARGE", "The request headers are too large."),
}


def error_middleware(base_path: str):
    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code, message = _HTTP_CODES.get(exc.status, ("VALIDATION_FAILED", exc.reason))
            headers = {"Allow": "GET"} if exc.status == 405 else None
            return envelope(exc.status, code, message.format(base=base_path), headers=headers)
        except TransientError as exc:
            log.warning("dependency unavailable on %s: %s", request.path, exc)
            return envelope(503, "SERVICE_UNAVAILABLE", "A dependency is temporarily unavailable; retry shortly.", retry_after_sec=1)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            return envelope(500, "INTERNAL", "An internal error occurred; it has been logged.")

    return middleware
