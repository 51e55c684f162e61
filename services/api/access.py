"""The access middleware of the read API: gates, limits and their headers.

Order of gates: authentication (401 NOT_AUTHENTICATED), workspace suspended (403
WORKSPACE_SUSPENDED), badge missing or unknown (403 BADGE_MISSING), the per-minute rate limit
(429 RATE_LIMITED), the daily quota (429 QUOTA_EXHAUSTED), then the request itself. All five
are decided without a database round trip of their own: the three gates from the process's
in-memory principals (:class:`..common.access.Principals`), the two limits by the admission
batcher (:mod:`.admission`), which settles all concurrent requests in one statement.

What counts: every request that passes the three gates and is admitted by both limits
counts once against the minute window and once against the day, whatever the handler then
answers (200, 304, a 4xx such as 422 or 404, or a 5xx): it cost us the work. A 401 or 403
never counts, and a request refused with 429 counts in neither window, so a client that
waits for ``Retry-After`` is admitted. Only matched partner routes are gated; unknown paths
answer 404 without authentication and count nothing.

Every counted response, and every 429, carries X-RateLimit-Limit/Remaining/Reset,
X-Quota-Limit/Remaining/Reset, RateLimit-Policy and RateLimit; every counted response also
carries X-Log-Position, the consistency mark. Errors raised by handlers are turned into responses by the
error middleware outside this one, so they get the headers on the way out here.
"""

from __future__ import annotations

from aiohttp import web

from ..common.access import AccessDenied, bearer_key
from ..common.envelope import ApiError, from_failure
from .errors import from_http_exception
from .limits import Usage, add_headers, refusal
from .state import ADMISSIONS, CONFIG, METRICS, POOL, PRINCIPALS, log_position

PARTNER = "partner:"

#: The consistency mark on every response after the gates (see :func:`.state.log_position`).
LOG_POSITION_HEADER = "X-Log-Position"


def _admitted_headers(request: web.Request, usage: Usage, target) -> None:
    """What every response to an admitted request carries: pacing headers and the mark."""
    add_headers(target, usage)
    target[LOG_POSITION_HEADER] = log_position(request)


def denial_error(exc: AccessDenied) -> ApiError:
    d = exc.denial
    headers = {"WWW-Authenticate": 'Bearer realm="tickerwire"'} if d.status == 401 else None
    return ApiError(d.status, d.code, d.message, headers=headers)


async def _gated(request: web.Request, handler) -> web.StreamResponse:
    app = request.app
    config = app[CONFIG]
    try:
        principal = await app[PRINCIPALS].authorize(app[POOL], bearer_key(request.headers.get("Authorization")))
    except AccessDenied as exc:
        app[METRICS].rejected.labels(exc.denial.code).inc()
        raise denial_error(exc) from None
    usage = await app[ADMISSIONS].admit(principal)
    if not usage.admitted:
        app[METRICS].rejected.labels(usage.outcome).inc()
        raise refusal(usage)
    request["principal"] = principal
    request["usage"] = usage
    try:
        response = await handler(request)
    except ApiError as exc:
        _admitted_headers(request, usage, exc.headers)
        raise
    except web.HTTPException as exc:
        if exc.status < 400:
            _admitted_headers(request, usage, exc.headers)
            raise
        error = from_http_exception(exc, config.base_path)
        _admitted_headers(request, usage, error.headers)
        raise error from None
    except Exception as exc:  # a 503 or 500 of a counted request carries the headers too
        error = from_failure(exc, request)
        _admitted_headers(request, usage, error.headers)
        raise error from None
    if not response.prepared:
        _admitted_headers(request, usage, response.headers)
    return response


def access_middleware():
    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        route = request.match_info.route.name or ""
        if not route.startswith(PARTNER):
            return await handler(request)
        return await _gated(request, handler)

    return middleware
