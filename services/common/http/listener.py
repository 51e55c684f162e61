"""How every listener of every process accepts connections (partner and admin alike).

aiohttp parses HTTP; this module adds what a port facing the internet needs:

- a **header-read timeout**: a connection that has not sent a whole request head within
  ``header_timeout_s`` of connecting (or of the first byte of its next request) is closed,
  so half-sent requests (slowloris) and silent connections cannot pile up;
- an **idle keep-alive timeout** (aiohttp's ``keepalive_timeout``) between requests;
- a **bound on concurrent connections**: at the bound, the oldest connection with no request
  in progress (idle, or still sending its request head) is closed to make room; only when
  every connection is busy with a request is the new one refused, with a 503 JSON envelope,
  and closed. So idle or slow connections can never lock out a client that sends a request;
- **low-level errors** (requests aiohttp cannot parse) answered with the JSON error envelope
  and logged as one line without a traceback, at most ``LOG_BURST`` lines and then one per
  second (the suppressed count goes in the next line and in a metric);
- a request line of an HTTP version other than 1.0 and 1.1 (aiohttp's parser lets ``HTTP/2.0``
  and ``HTTP/0.9`` through) gets 505 ``HTTP_VERSION_NOT_SUPPORTED`` and the connection closed;
- a ``Server`` header naming no versions on every response, these included, and an
  ``X-Request-Id`` on these refusals too (the client's when the request was parsed far enough
  to read a well-formed one, else generated; it is also in the refusal's log line);
- a request body that was not read (no route reads one) is not read and thrown away after the
  answer: the connection is closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Awaitable, Callable

from aiohttp import HttpVersion10, HttpVersion11, web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CollectorRegistry, Counter, Gauge

from ..runtime.logs import LogLimiter
from .envelope import INTERNAL_MESSAGE, JSON, REFUSED_REQUESTS, error_body
from .requestlog import HEADER as REQUEST_ID_HEADER, request_id

log = logging.getLogger("tickerwire.listener")

SERVER = "tickerwire"


class ListenerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.connections = Gauge("tickerwire_http_connections", "Open connections", ["listener"], registry=registry)
        self.shed = Counter(
            "tickerwire_http_connections_shed_total",
            "Connections closed or refused by the listener: header_timeout, idle_evicted (to make room "
            "at the connection bound), refused_busy (503: every connection was busy)",
            ["listener", "reason"],
            registry=registry,
        )
        self.unparseable = Counter(
            "tickerwire_http_unparseable_requests_total",
            "Requests aiohttp could not parse",
            ["listener"],
            registry=registry,
        )


@dataclass
class ConnectionLimits:
    """What a listener allows each connection: how many at once, and how long for a request head
    and between requests."""

    max_connections: int
    header_timeout_s: float
    keepalive_timeout_s: float


def _refusal() -> bytes:
    body = error_body("SERVICE_UNAVAILABLE", "Too many open connections; retry shortly.", retry_after_sec=1)
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        f"Server: {SERVER}\r\n"
        "Content-Type: application/json\r\n"
        "Cache-Control: no-store\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


REFUSAL = _refusal()


class Guard:
    """The connections of one listener: the bound, the timeouts, the error log's limiter."""

    def __init__(self, name: str, limits: ConnectionLimits, metrics: ListenerMetrics) -> None:
        self.name = name
        self.limits = limits
        self.metrics = metrics
        self.limiter = LogLimiter()
        self.open: OrderedDict[GuardedHandler, None] = OrderedDict()

    def admit(self, handler: "GuardedHandler") -> bool:
        if len(self.open) >= self.limits.max_connections:
            victim = next((h for h in self.open if h.idle), None)
            if victim is None:
                self.metrics.shed.labels(self.name, "refused_busy").inc()
                return False
            self.shed(victim, "idle_evicted")
        self.open[handler] = None
        self.metrics.connections.labels(self.name).set(len(self.open))
        return True

    def shed(self, handler: "GuardedHandler", reason: str) -> None:
        self.metrics.shed.labels(self.name, reason).inc()
        self.release(handler)
        handler.force_close()

    def release(self, handler: "GuardedHandler") -> None:
        if self.open.pop(handler, 0) is None:
            self.metrics.connections.labels(self.name).set(len(self.open))


class GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol, with the guard's bound and header-read timeout, and
    JSON error pages for requests it cannot parse."""

    def __init__(self, manager: web.Server, *, guard: Guard, **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.finished = 0  # requests answered; parsed ones are aiohttp's _request_count
        self.header_timer: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        """No request in progress: waiting for (the rest of) the next request head."""
        return not self._upgraded and self._request_count == self.finished

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.guard.admit(self):
            self._manager = None  # never registered with the server: nothing to clean up there
            transport.write(REFUSAL)  # type: ignore[attr-defined]
            transport.close()
            return
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm_header_timer()
        self.guard.release(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.idle:
            self._disarm_header_timer()
        elif self.header_timer is None:
            # Part of a keep-alive connection's next head: its clock starts with these bytes. A
            # whole head in one read (nearly every request) never needs a timer.
            self._arm_header_timer()

    async def finish_response(self, request, resp, start_time):
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self.finished += 1

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self.header_timer = self._loop.call_later(self.guard.limits.header_timeout_s, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _header_timeout(self) -> None:
        self.header_timer = None
        if self.idle and self.transport is not None:
            self.guard.shed(self, "header_timeout")

    def handle_error(self, request, status=500, exc=None, message=None):
        """aiohttp's own handler logs a traceback for every unparseable request; this one
        logs one rate-limited line (a traceback only for our own 5xx) and answers JSON."""
        if status < 500:
            self.guard.metrics.unparseable.labels(self.guard.name).inc()
        rid = request_id(None)  # the request's headers were not parsed
        suppressed = self.guard.limiter.allow()
        if suppressed is not None:
            reason = str(message or exc or "")[:200]
            fields = {"status": status, "remote": request.remote, "suppressed": suppressed, "request_id": rid}
            if status >= 500:
                log.error("request failed: %s", reason, exc_info=exc, extra={"fields": fields})
            else:
                log.info("unparseable request: %s", reason, extra={"fields": fields})
        if request.writer.output_size > 0:
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        if status >= 500:
            code, text = "INTERNAL", INTERNAL_MESSAGE
        else:
            if status == 400:
                status = refused_status(exc, self.max_line_size, self.max_field_size)
            code, text = REFUSED_REQUESTS.get(status, REFUSED_REQUESTS[400])
        response = _refused_response(status, code, text, rid)
        response.force_close()
        return response


def _refused_response(status: int, code: str, text: str, rid: str) -> web.Response:
    """The envelope of a request refused before the application saw it."""
    return web.Response(
        status=status,
        body=error_body(code, text),
        content_type=JSON,
        headers={"Server": SERVER, "Cache-Control": "no-store", REQUEST_ID_HEADER: rid},
    )


def refused_status(exc: BaseException | None, max_line_size: int, max_field_size: int) -> int:
    """The status of a request the parser refused: 414 for a request line over its bound, 431
    for a header over its bound or too many headers, else 400. aiohttp raises the same
    ``LineTooLong`` for both bounds and names only the bound, so where the two bounds are equal
    the answer stays 400."""
    if isinstance(exc, LineTooLong) and len(exc.args) >= 2 and max_line_size != max_field_size:
        if exc.args[1] == max_line_size:
            return 414
        if exc.args[1] == max_field_size:
            return 431
    if isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc):
        return 431
    return 400


#: On stop, requests in progress get this long to finish before they are cancelled (aiohttp's
#: default is 60 s). The stream closes its WebSockets before (CLOSE_GRACE_S); the Kubernetes
#: grace periods in deploy/ are sized with this figure (docs/operations.md).
SHUTDOWN_TIMEOUT_S = 10.0


class _GuardedServer(web.Server):
    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """An AppRunner whose connections are :class:`GuardedHandler` s of ``guard``."""

    def __init__(self, app: web.Application, guard: Guard) -> None:
        super().__init__(
            app,
            handle_signals=False,
            access_log=None,
            guard=guard,
            keepalive_timeout=guard.limits.keepalive_timeout_s,
            # No route reads a request body. aiohttp would read an unread one to its end (for up
            # to 10 s) to reuse the connection; the connection is closed after the answer instead.
            lingering_time=0,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        )

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _GuardedServer  # same object, guarded connections
        server.request_handler = _refusals_before_the_application(server.request_handler)
        return server


#: The HTTP versions every listener speaks. aiohttp's parser also accepts ``HTTP/2.0`` and
#: ``HTTP/0.9`` request lines and would answer them as if they were HTTP/1.x.
SPOKEN_VERSIONS = frozenset({HttpVersion10, HttpVersion11})


def _refusals_before_the_application(handle: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]):
    """What aiohttp would otherwise answer or let through before any middleware: a request line
    of another HTTP version than 1.0 and 1.1 gets 505 (the envelope, connection closed); an
    ``Expect`` other than 100-continue, which aiohttp answers in plain text (417), gets the
    envelope like every other refusal."""

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        if request.version not in SPOKEN_VERSIONS:
            response = _refused_response(
                505, *REFUSED_REQUESTS[505], request_id(request.headers.get(REQUEST_ID_HEADER))
            )
            response.force_close()
            response.headers["Connection"] = "close"  # aiohttp writes it for HTTP/1.1 only
            return response
        try:
            return await handle(request)
        except web.HTTPExpectationFailed:
            return _refused_response(417, *REFUSED_REQUESTS[417], request_id(request.headers.get(REQUEST_ID_HEADER)))

    return handler


async def server_header(_: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: the ``Server`` header names the product, no versions."""
    response.headers["Server"] = SERVER
