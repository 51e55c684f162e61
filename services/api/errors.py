"""The error envelope of spec section 7, and the middleware that guarantees it.

Every 4xx and 5xx leaves this service as ``{"error": {"code", "message", "field"?,
"retry_after_sec"?}}`` with ``Content-Type: application/json``: unknown routes, wrong
methods, bad input, and failures of our own (never a traceback, never an HTML page).
"""

from __future__ import annotations

import logging
from typing import Mapping

import asyncpg
import orjson
from aiohttp import web

from ..common.errors import TransientError
from ..common.headers import undecodable_header

log = logging.getLogger(__name__)

JSON = "application/json"


class ApiError(Exception):
    """An error a partner sees. Raise it anywhere in a handler."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        retry_after_sec: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after_sec = retry_after_sec
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        err: dict[str, object] = {"code": self.code, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        if self.retry_after_sec is not None:
            err["retry_after_sec"] = self.retry_after_sec
        headers = {"Cache-Control": "no-store", **self.headers}
        if self.retry_after_sec is not None:
            headers.setdefault("Retry-After", str(self.retry_after_sec))
        return web.Response(status=self.status, body=orjson.dumps({"error": err}), content_type=JSON, headers=headers)


def validation_failed(field: str, message: str) -> ApiError:
    return ApiError(422, "VALIDATION_FAILED", message, field=field)


def not_found(message: str = "The resource does not exist or is not visible to this key.") -> ApiError:
    return ApiError(404, "NOT_FOUND", message)


_HTTP_CODES = {
    400: ("VALIDATION_FAILED", "The request could not be parsed."),
    404: ("NOT_FOUND", "No such endpoint. See {base}/openapi.json for the endpoints of this API."),
    405: ("METHOD_NOT_ALLOWED", "This API is read-only: only GET (and HEAD) are allowed on this path."),
    413: ("PAYLOAD_TOO_LARGE", "The request is too large."),
    414: ("URI_TOO_LONG", "The request URI is too long."),
    431: ("HEADERS_TOO_LARGE", "The request headers are too large."),
}


def from_http_exception(exc: web.HTTPException, base_path: str) -> ApiError:
    code, message = _HTTP_CODES.get(exc.status, ("INTERNAL" if exc.status >= 500 else "VALIDATION_FAILED", exc.reason))
    headers = {}
    if exc.status == 405:
        headers["Allow"] = "GET, HEAD"
    return ApiError(exc.status, code, message.format(base=base_path), headers=headers)


def from_failure(exc: Exception, request: web.Request) -> ApiError:
    """503 for a dependency that is briefly unavailable, else 500; either way logged."""
    if isinstance(exc, (TransientError, asyncpg.QueryCanceledError)):
        log.warning("dependency unavailable on %s: %s", request.path, exc)
        return ApiError(503, "SERVICE_UNAVAILABLE", "A dependency is temporarily unavailable; retry shortly.", retry_after_sec=1)
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    return ApiError(500, "INTERNAL", "An internal error occurred; it has been logged.")


#: No CORS: partner keys are secrets, and a browser calling the API would hold one. No
#: response carries Access-Control-* headers, so browsers refuse cross-origin reads, and a
#: preflight gets this 405.
NO_CORS = (
    "Browsers may not call this API (no CORS): an API key is a secret and must stay on your "
    "server. Call the API from your backend."
)


def error_middleware(base_path: str):
    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        bad = undecodable_header(request.headers.items())
        if bad is not None:
            return ApiError(400, "VALIDATION_FAILED", f"The {bad} header is not valid UTF-8.").response()
        try:
            return await handler(request)
        except ApiError as exc:
            return exc.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            error = from_http_exception(exc, base_path)
            if exc.status == 405 and request.method == "OPTIONS":
                error.message = NO_CORS
            return error.response()
        except Exception as exc:
            return from_failure(exc, request).response()

    return middleware
