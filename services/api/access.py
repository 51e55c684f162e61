"""The access middleware of the read API: the shared gates, answered as spec-7 errors.

Order of gates (see README): authentication, workspace suspended, badge missing or unknown,
then the rate limit and the daily quota (:mod:`.limits`), then the request itself.
"""

from __future__ import annotations

from aiohttp import web

from ..common.access import AccessDenied, bearer_key, check_access
from .errors import ApiError
from .state import POOL

PARTNER = "partner:"


def denial_error(exc: AccessDenied) -> ApiError:
    d = exc.denial
    headers = {"WWW-Authenticate": 'Bearer realm="tickerwire"'} if d.status == 401 else None
    return ApiError(d.status, d.code, d.message, headers=headers)


def access_middleware():
    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        route = request.match_info.route.name or ""
        if not route.startswith(PARTNER):
            return await handler(request)
        try:
            request["principal"] = await check_access(request.app[POOL], bearer_key(request.headers.get("Authorization")))
        except AccessDenied as exc:
            raise denial_error(exc) from None
        return await handler(request)

    return middleware
