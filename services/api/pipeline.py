"""The read API's request path: ONE middleware for every request of the partner application.

In order, for each request: its id and access-log line (:mod:`..common.http.requestlog`), the 400 of
an undecodable header, the 413 of a body over the bound or of unknown length, then either the
partner path (:func:`.gates.gated`: the gates, the admission, the handler, its
representation, the pacing headers) or, for every other route
(the OpenAPI document, the docs, an unknown path, a wrong method), the handler with its errors
as the envelope; finally the request's metrics and its ``X-Request-Id`` header.

One layer instead of six: aiohttp calls each middleware through its own wrapper and coroutine,
and the per-request work of the former layers (a log record, two locked metric updates, header
copies, a response hook) was most of what a request answered from memory cost
(tests/benchmarks/analysis.md has the profile). The behaviour, headers and envelope are those
of the layers it replaces, in the same order: the representation (gzip, then the conditional
request against the representation's own tag) inside the pacing headers, so a 304 carries them.
"""

from __future__ import annotations

import time

from aiohttp import web

from ..common.http import requestlog
from ..common.http.envelope import Handler, Routes, answer, body_error, from_failure, header_error, refuse_body
from .compression import Compressed, negotiate
from .conditional import evaluate
from .gates import PARTNER, gated
from .metrics import RequestStats


def request_middleware(routes: Routes, compressed: Compressed, stats: RequestStats, max_body: int):
    async def represent(request: web.Request, response: web.Response) -> web.StreamResponse:
        return evaluate(request, await negotiate(request, response, compressed))

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        rid, token = requestlog.opened(request)
        started = time.perf_counter()
        status: int | None = None  # None: the request ends in an exception (logged as 500, not counted)
        route = request.match_info.route.name
        try:
            try:
                response: web.StreamResponse
                partner = route is not None and route.startswith(PARTNER)
                if (error := header_error(request, authenticated=partner)) is not None:
                    response = error.response()
                elif (error := body_error(request, max_body, routes)) is not None:
                    response = refuse_body(error)
                elif partner:
                    response = await gated(request, handler, routes, represent)
                else:
                    response = await answer(routes, request, handler)
            except web.HTTPException as exc:  # below 400 (a redirect): aiohttp sends it
                status = exc.status
                exc.headers[requestlog.HEADER] = rid
                raise
            except Exception as exc:  # a bug on the way out (the paths above answer their own errors)
                response = from_failure(exc, request).response()
            status = response.status
            if not response.prepared:
                response.headers[requestlog.HEADER] = rid
            return response
        finally:
            if status is not None:
                stats.observe(route or "unmatched", status, time.perf_counter() - started)
            requestlog.closed(request, token, 500 if status is None else status, started)

    return middleware
