"""Request ids and the access log of partner requests.

A request id comes from the client's ``X-Request-Id`` when it is 1-128 characters of
``[A-Za-z0-9._:-]``, else it is generated (``req_``, a random per-process prefix and a counter:
unique without a system call per request). It is echoed in the response's ``X-Request-Id``,
written into every log line of the request (a context variable, read by a logging filter),
and into the one access-log line per partner request: method, route template, status,
duration, workspace id. Never the key, never the query string (the stream's ``?key=``).

:func:`opened` and :func:`closed` bracket a request; :func:`add_request_log` installs them as
a middleware (the stream), and the read API's own request middleware calls them directly.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import re
import secrets
import time

from aiohttp import web

from ..runtime.logs import REQUEST_ID, RequestIdFilter
from ..runtime.shaped_lines import ShapedLines

__all__ = ["HEADER", "REQUEST_ID", "RequestIdFilter", "add_request_log", "closed", "opened", "request_id"]

log = logging.getLogger("tickerwire.access")
#: The access-log lines, written from a template per (method, route, status, workspace).
_LINES = ShapedLines(log, "duration_ms")

HEADER = "X-Request-Id"
_VALID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
#: Where the request id is kept on the request, for the response hook (which runs after the
#: middleware has returned, outside the request's context).
REQUEST_ID_KEY = web.RequestKey("request_id", str)
#: The workspace of an authorized request, for its access-log line (set by the access gates).
WORKSPACE_KEY = web.RequestKey("workspace_id", str)
_PREFIX = "req_" + secrets.token_hex(6)
_COUNTER = itertools.count(1)


def request_id(supplied: str | None) -> str:
    """The client's id when it is well-formed, else a fresh one."""
    if supplied is not None and _VALID.fullmatch(supplied):
        return supplied
    return f"{_PREFIX}{next(_COUNTER):012x}"


def route_template(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def opened(request: web.Request) -> tuple[str, contextvars.Token]:
    """A request begins: its id (in the logging context; the caller puts it on the response)."""
    rid = request_id(request.headers.get(HEADER))
    return rid, REQUEST_ID.set(rid)


def closed(request: web.Request, token: contextvars.Token, status: int, started: float) -> None:
    """A request ends: its access-log line; the logging context forgets its id."""
    try:
        method, route, workspace = request.method, route_template(request), request.get(WORKSPACE_KEY)
        _LINES.write(
            (method, route, status, workspace),
            int((time.perf_counter() - started) * 100_000 + 0.5) / 100,  # round(..., 2), faster
            lambda: (
                f"{method} {route} {status}",
                {"method": method, "route": route, "status": status, "duration_ms": 0.0, "workspace_id": workspace},
            ),
        )
    finally:
        REQUEST_ID.reset(token)


def _access_log_middleware():

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        rid, token = opened(request)
        request[REQUEST_ID_KEY] = rid  # for echo_request_id, which runs outside this middleware
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            closed(request, token, status, started)

    return middleware


async def echo_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: the response carries the request's id (WebSocket handshakes too)."""
    rid = request.get(REQUEST_ID_KEY)
    if rid is not None:
        response.headers[HEADER] = rid


def add_request_log(app: web.Application) -> None:
    """Access log and request ids for a partner application: the outermost middleware, and
    the response hook that echoes the id."""
    app.middlewares.insert(0, _access_log_middleware())
    app.on_response_prepare.append(echo_request_id)
