"""The access gates of the read API's partner routes: gates, limits and their headers.

Order of gates: authentication (401 NOT_AUTHENTICATED; an API key, or a console session:
:mod:`.sessions`), workspace suspended (403
WORKSPACE_SUSPENDED), badge missing or unknown (403 BADGE_MISSING), the per-minute rate limit
(429 RATE_LIMITED), the daily quota (429 QUOTA_EXHAUSTED), then the request itself. All five
are decided without a database round trip of their own: the three gates from the process's
in-memory principals (:class:`..readmodel.access.Principals`), the two limits by the admission
batcher (:mod:`.admission`), which settles all concurrent requests in one statement.

What counts: every request that passes the three gates and is admitted by both limits
counts once against the minute window and once against the day, whatever the handler then
answers (200, 304, a 4xx such as 422 or 404, or a 5xx): it cost us the work. A 401 or 403
never counts, and a request refused with 429 counts in neither window, so a client that
waits for ``Retry-After`` is admitted. Only matched partner routes are gated; unknown paths
answer 404 without authentication and count nothing.

Every counted response, and every 429, carries X-RateLimit-Limit/Remaining/Reset,
X-Quota-Limit/Remaining/Reset, RateLimit-Policy and RateLimit; every counted response also
carries X-Log-Position, the consistency mark. Errors raised by handlers are turned into the
envelope here, so they carry the headers too. :func:`gated` is called by the request path
(:mod:`.pipeline`) for every matched partner route.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from aiohttp import web

from ..common.http.envelope import WWW_AUTHENTICATE, ApiError, Handler, Routes, from_failure
from ..common.http.requestlog import WORKSPACE_KEY
from ..readmodel.access import AccessDenied
from .freshness import honour as honour_min_position
from .limits import Usage, refusal
from .sessions import authenticate
from .state import ADMISSIONS, METRICS, log_position

PARTNER = "partner:"

#: The consistency mark on every response after the gates (see :func:`.state.log_position`).
LOG_POSITION_HEADER = "X-Log-Position"

#: What the request path does to a handler's 200 before the pacing headers (the representation:
#: compression, then the conditional request).
Represent = Callable[[web.Request, web.Response], Awaitable[web.StreamResponse]]


def _admitted_headers(request: web.Request, usage: Usage) -> dict[str, str]:
    """What every response to an admitted request carries: pacing headers and the mark."""
    headers = usage.headers()
    headers[LOG_POSITION_HEADER] = log_position(request).text()
    return headers


def denial_error(exc: AccessDenied) -> ApiError:
    d = exc.denial
    headers = dict(WWW_AUTHENTICATE) if d.status == 401 else None
    return ApiError(d.status, d.code, d.message, headers=headers)


async def gated(request: web.Request, handler: Handler, routes: Routes, represent: Represent) -> web.StreamResponse:
    """The response to a request for a partner route: refused by a gate or a limit, or the
    handler's (errors as the envelope), with the pacing headers and the mark once counted."""
    app = request.app
    try:
        principal = await authenticate(request)
        usage = await app[ADMISSIONS].admit(principal)
    except AccessDenied as exc:
        app[METRICS].rejected.labels(exc.denial.code).inc()
        return denial_error(exc).response()
    except Exception as exc:  # e.g. the access fallback or admission unavailable: 503, not counted
        return from_failure(exc, request).response()
    if not usage.admitted:
        app[METRICS].rejected.labels(usage.outcome).inc()
        return refusal(usage).response()
    request[WORKSPACE_KEY] = principal.workspace_id
    try:
        await honour_min_position(request)
        response = await handler(request)
    except ApiError as exc:
        error = exc
    except web.HTTPException as exc:
        if exc.status < 400:
            exc.headers.update(_admitted_headers(request, usage))
            raise
        error = routes.from_http_exception(exc)
    except Exception as exc:  # a 503 or 500 of a counted request carries the headers too
        error = from_failure(exc, request)
    else:
        if response.status == 200 and isinstance(response, web.Response) and not response.prepared:
            response = await represent(request, response)
        if not response.prepared:  # extend: a handler's response never has these names yet
            response.headers.extend(_admitted_headers(request, usage))
        return response
    error.headers.update(_admitted_headers(request, usage))
    return error.response()
