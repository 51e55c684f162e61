"""Who a partner request is: an API key (``Authorization: Bearer``) or a console session.

A console session (docs/console.md, :mod:`..readmodel.consoles`) is its ``tw_console`` cookie
and, on every request whatever its method, the header ``X-CSRF-Token`` equal to the session's
CSRF token: a cookie alone authenticates nobody, so a page of another site, whose requests the
browser would send with the cookie (were it not ``SameSite=Strict``), cannot act. A request with an
``Authorization`` header is always judged by it, cookie or not. A session then passes exactly
the key's gates (:meth:`..readmodel.access.Principals.authorize_hash`): a key revoked or a
workspace suspended since the sign-in refuses the session at its next request.
"""

from __future__ import annotations

from aiohttp import web

from ..common.http.keys import authorization, bearer_key
from ..readmodel.access import NOT_AUTHENTICATED, AccessDenied, Denial, Principal
from ..readmodel.consoles import Session, find_session
from .state import CONFIG, POOL, PRINCIPALS

COOKIE = "tw_console"
CSRF_HEADER = "X-CSRF-Token"
#: A session's whole life: absolute, never renewed (sign in again after it).
LIFETIME_S = 30 * 60

NO_SESSION = Denial(
    401, "NOT_AUTHENTICATED", "No console session, or it has ended: sign in to the console again with an API key."
)
NO_CSRF = Denial(
    401,
    "NOT_AUTHENTICATED",
    f"A console session's requests must carry the header {CSRF_HEADER} with the session's CSRF token.",
)


def by_session(request: web.Request) -> bool:
    """Whether the request is judged as a console session's (a cookie and no Authorization)."""
    return "Authorization" not in request.headers and COOKIE in request.cookies


async def session_of(request: web.Request) -> Session:
    """The live session of the request's cookie, its CSRF header checked; raises :class:`AccessDenied`."""
    app = request.app
    session = await find_session(app[POOL], request.cookies.get(COOKIE), app[CONFIG].db_statement_timeout_s)
    if session is None:
        raise AccessDenied(NO_SESSION)
    if not session.csrf_matches(request.headers.get(CSRF_HEADER)):
        raise AccessDenied(NO_CSRF)
    return session


async def authenticate(request: web.Request) -> Principal:
    """The principal the request acts as, past the three gates; raises :class:`AccessDenied`."""
    app = request.app
    if not by_session(request):
        return await app[PRINCIPALS].authorize(app[POOL], bearer_key(authorization(request.headers)))
    return (await session_principal(request))[1]


async def session_principal(request: web.Request) -> tuple[Session, Principal]:
    """The request's session (cookie and CSRF header) and its key's principal past the gates."""
    app = request.app
    session = await session_of(request)
    principal = await app[PRINCIPALS].authorize_hash(app[POOL], session.key_hash)
    if principal.workspace_id != session.workspace_id:  # a key never moves; refuse if it ever did
        raise AccessDenied(NOT_AUTHENTICATED)
    return session, principal
