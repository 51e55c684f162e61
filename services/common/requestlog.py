"""Request ids and the access log of partner requests.

A request id comes from the client's ``X-Request-Id`` when it is 1-128 characters of
``[A-Za-z0-9._:-]``, else it is generated. It is echoed in the response's ``X-Request-Id``,
written into every log line of the request (a context variable, read by a logging filter),
and into the one access-log line per partner request: method, route template, status,
duration, workspace id. Never the key, never the query string (the stream's ``?key=``).
"""

from __future__ import annotations

import contextvars
import logging
import re
import secrets
import time

from aiohttp import web

log = logging.getLogger("tickerwire.access")

HEADER = "X-Request-Id"
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
_VALID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
#: Where the request id is kept on the request, for the response hook (which runs after the
#: middleware has returned, outside the request's context).
_KEY = "request_id"


def request_id(supplied: str | None) -> str:
    """The client's id when it is well-formed, else a fresh one."""
    if supplied is not None and _VALID.fullmatch(supplied):
        return supplied
    return "req_" + secrets.token_hex(12)


class RequestIdFilter(logging.Filter):
    """Adds the current request's id to every log record written while it is handled."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = REQUEST_ID.get()
        if rid is not None:
            record.request_id = rid
        return True


def route_template(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _access_log_middleware():

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        rid = request_id(request.headers.get(HEADER))
        request[_KEY] = rid
        token = REQUEST_ID.set(rid)
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            principal = request.get("principal")
            log.info(
                "%s %s %d", request.method, route_template(request), status,
                extra={"fields": {
                    "method": request.method,
                    "route": route_template(request),
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    "workspace_id": getattr(principal, "workspace_id", None),
                }},
            )
            REQUEST_ID.reset(token)

    return middleware


async def echo_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: the response carries the request's id (WebSocket handshakes too)."""
    rid = request.get(_KEY)
    if rid is not None:
        response.headers[HEADER] = rid


def add_request_log(app: web.Application) -> None:
    """Access log and request ids for a partner application: the outermost middleware, and
    the response hook that echoes the id."""
    app.middlewares.insert(0, _access_log_middleware())
    app.on_response_prepare.append(echo_request_id)
