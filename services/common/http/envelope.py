"""The error envelope (docs/api.md#error-envelope), for every process and every listener.

Every 4xx and 5xx leaves a Tickerwire process as ``{"error": {"code", "message", "field"?,
"retry_after_sec"?}}`` with ``Content-Type: application/json`` and ``Cache-Control:
no-store``: refused requests, unknown routes, wrong methods, requests aiohttp cannot parse
(:mod:`.listener`), and failures of our own (never a traceback, never an HTML page). The shape
is built here only: :class:`ApiError` (raise it anywhere in a handler, or answer with its
``response()``), :func:`error_body` for the low-level handler, and :func:`error_middleware`,
which each partner application configures with its own words for an unknown path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

import asyncpg
import orjson
from aiohttp import web

from ..runtime.errors import TransientError
from .headers import undecodable_header

log = logging.getLogger(__name__)

JSON = "application/json"
INTERNAL_MESSAGE = "An internal error occurred; it has been logged."

#: What every 401 carries (RFC 9110 11.6.1): the scheme the partner API takes.
WWW_AUTHENTICATE = {"WWW-Authenticate": 'Bearer realm="tickerwire"'}

#: What a request aiohttp refuses before any handler runs is called, wherever it is refused.
REFUSED_REQUESTS: Mapping[int, tuple[str, str]] = {
    400: ("VALIDATION_FAILED", "The request could not be parsed."),
    413: ("PAYLOAD_TOO_LARGE", "The request is too large."),
    414: ("URI_TOO_LONG", "The request URI is too long."),
    417: ("VALIDATION_FAILED", "Unknown Expect header: only 100-continue is supported (or send no Expect header)."),
    431: ("HEADERS_TOO_LARGE", "The request headers are too large."),
    505: ("HTTP_VERSION_NOT_SUPPORTED", "Only HTTP/1.1 (and HTTP/1.0) is supported."),
}


def error_body(code: str, message: str, *, field: str | None = None, retry_after_sec: int | None = None) -> bytes:
    """The envelope's bytes."""
    err: dict[str, object] = {"code": code, "message": message}
    if field is not None:
        err["field"] = field
    if retry_after_sec is not None:
        err["retry_after_sec"] = retry_after_sec
    return orjson.dumps({"error": err})


class ApiError(Exception):
    """An error a partner sees: raise it in a handler, or answer with :meth:`response`."""

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
        """The envelope as a response; a 429 or 503 also carries ``Retry-After``."""
        headers = {"Cache-Control": "no-store", **self.headers}
        if self.retry_after_sec is not None:
            headers.setdefault("Retry-After", str(self.retry_after_sec))
        body = error_body(self.code, self.message, field=self.field, retry_after_sec=self.retry_after_sec)
        return web.Response(status=self.status, body=body, content_type=JSON, headers=headers)


def envelope(status: int, code: str, message: str, **details: Any) -> web.Response:
    """The response of ``ApiError(status, code, message, **details)``, for handlers that answer
    rather than raise."""
    return ApiError(status, code, message, **details).response()


def from_failure(exc: BaseException, request: web.Request) -> ApiError:
    """503 for a dependency that is briefly unavailable, else 500; either way logged."""
    if isinstance(exc, (TransientError, asyncpg.QueryCanceledError)):
        log.warning("dependency unavailable on %s: %s", request.path, exc)
        return ApiError(
            503, "SERVICE_UNAVAILABLE", "A dependency is temporarily unavailable; retry shortly.", retry_after_sec=1
        )
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    return ApiError(500, "INTERNAL", INTERNAL_MESSAGE)


@dataclass(frozen=True, slots=True)
class Routes:
    """What one application says about requests none of its routes takes."""

    #: The 404 message for an unknown path.
    not_found: str
    #: The 405 message for a wrong method, and the methods its ``Allow`` header lists.
    method_not_allowed: str
    allow: str
    #: The 405 message for a CORS preflight (``OPTIONS``), when it has one of its own.
    preflight: str | None = None

    def method_error(self, method: str, allowed: str | None = None) -> ApiError:
        """The 405 of a method no route takes, with ``Allow`` (``allowed``: the path's own methods)."""
        message = self.preflight if method == "OPTIONS" and self.preflight else self.method_not_allowed
        return ApiError(405, "METHOD_NOT_ALLOWED", message, headers={"Allow": allowed or self.allow})

    def from_http_exception(self, exc: web.HTTPException, method: str = "GET") -> ApiError:
        """The envelope of an aiohttp HTTP error (an unknown route, a wrong method, ...)."""
        if exc.status == 404:
            return ApiError(404, "NOT_FOUND", self.not_found)
        if exc.status == 405:
            methods = getattr(exc, "allowed_methods", None)
            return self.method_error(method, ", ".join(sorted(methods)) if methods else None)
        code, message = REFUSED_REQUESTS.get(
            exc.status, ("INTERNAL" if exc.status >= 500 else "VALIDATION_FAILED", exc.reason)
        )
        return ApiError(exc.status, code, message)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def answer(routes: Routes, request: web.Request, handler: Handler) -> web.StreamResponse:
    """``handler``'s response, every error it raises turned into the envelope (HTTP exceptions
    below 400, redirects and the like, go through)."""
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return routes.from_http_exception(exc, request.method).response()
    except Exception as exc:
        return from_failure(exc, request).response()


def header_error(request: web.Request, *, authenticated: bool = False) -> ApiError | None:
    """The 400 of a request with a header that is not UTF-8, refused before any handler sees it;
    on a route that needs a key (``authenticated``), an undecodable ``Authorization`` is the 401
    of every invalid one (docs/api.md#access-gates)."""
    bad = undecodable_header(request.headers.items())
    if bad is None:
        return None
    if authenticated and bad.lower() == "authorization":
        return ApiError(
            401,
            "NOT_AUTHENTICATED",
            "The Authorization header is not valid UTF-8; send Authorization: Bearer <API_KEY>.",
            headers=dict(WWW_AUTHENTICATE),
        )
    return ApiError(400, "VALIDATION_FAILED", f"The {bad} header is not valid UTF-8.")


def body_error(request: web.Request, limit: int, routes: Routes) -> ApiError | None:
    """The 413 of a request that comes with a body over ``limit`` bytes (by its Content-Length)
    or of unknown length (chunked): no route of these services reads a body, and an unread one
    would otherwise be read and thrown away before the connection's next request. A CONNECT,
    whose "body" is the tunnel it asks for, gets the 405 of every method but GET and HEAD. The
    connection is closed after the answer (:func:`refuse_body`)."""
    if request.method == "CONNECT":
        return routes.method_error("CONNECT")
    length = request.content_length
    if length is not None and length > limit:
        return ApiError(
            413,
            "PAYLOAD_TOO_LARGE",
            f"The request body is {length} bytes; at most {limit} are accepted, and no route reads one.",
        )
    if length is None and request.body_exists:
        return ApiError(
            413,
            "PAYLOAD_TOO_LARGE",
            f"A request body of unknown length (chunked) is not accepted; send at most {limit} bytes with a Content-Length, or none.",
        )
    return None


def refuse_body(error: ApiError) -> web.Response:
    """The envelope of :func:`body_error`, closing the connection instead of reading the body."""
    response = error.response()
    response.force_close()
    return response


def error_middleware(routes: Routes, *, check_headers: bool = False, max_body: int | None = None):
    """Every error leaving the application as the envelope. ``check_headers``: refuse a request
    with a header that is not UTF-8 with 400 before any handler sees it. ``max_body``: refuse a
    larger request body (or one of unknown length) with 413 (:func:`body_error`)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if check_headers and (error := header_error(request)) is not None:
            return error.response()
        if max_body is not None and (error := body_error(request, max_body, routes)) is not None:
            return refuse_body(error)
        return await answer(routes, request, handler)

    return middleware
