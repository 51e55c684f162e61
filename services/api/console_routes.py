"""The partner console (docs/console.md): one page, its script and style, and its sessions.

``GET /console`` is the page (``console/index.html`` of this package, the API's base path
written into a ``<meta>`` element, escaped), ``/console/console.js`` and ``/console/console.css``
its only assets: no CDN, no build step, no inline script or style, and a strict
Content-Security-Policy that says so. ``POST /console/sessions`` signs in with a key (the
``Authorization: Bearer`` header; the key's gates, rate limit and quota as for any request) and
answers with the session's cookie and CSRF token; ``DELETE /console/sessions/current`` signs out;
``POST /console/stream-tickets`` hands the session a single-use ticket for the stream's live
view (``console_stream_url``, whose origin the policy's ``connect-src`` admits). All three refuse a request whose ``Origin`` (or ``Sec-Fetch-Site``) says another site sent it.
"""

from __future__ import annotations

import html
from importlib import resources
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from ..common.http.envelope import JSON, ApiError, Handler, from_failure
from ..common.http.keys import authorization, bearer_key
from ..common.http.requestlog import WORKSPACE_KEY
from ..readmodel.access import AccessDenied
from ..readmodel.consoles import close_session, issue_ticket, open_session
from .gates import denial_error
from .limits import refusal
from .sessions import COOKIE, LIFETIME_S, session_of, session_principal
from .state import ADMISSIONS, CONFIG, POOL, PRINCIPALS

PREFIX = "/console"


def policy(stream_url: str = "") -> str:
    """What the page may load and call: this origin only, and the stream's (its live view)."""
    stream = urlsplit(stream_url)
    connect = f"'self' {stream.scheme}://{stream.netloc}" if stream_url else "'self'"
    return (
        f"default-src 'none'; script-src 'self'; style-src 'self'; connect-src {connect}; img-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def security_headers(stream_url: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": policy(stream_url),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}
#: A stream ticket opens one connection within this long of being handed out.
TICKET_LIFETIME_S = 30
CROSS_SITE = ApiError(403, "NOT_AUTHENTICATED", "The console refuses requests sent by another site.")


def _file(name: str) -> bytes:
    return (resources.files(__package__) / "console" / name).read_bytes()


def page_bytes(base_path: str, stream_url: str) -> bytes:
    """The page, with the partner API's base path and the stream's URL for its script."""
    page = _file("index.html")
    for name, value in (("api_base", base_path), ("stream_url", stream_url)):
        page = page.replace(b"{{%s}}" % name.encode(), html.escape(value, quote=True).encode())
    return page


def _secured(handler: Handler, headers: dict[str, str]) -> Handler:
    """``handler`` with the console's security ``headers`` on every answer, errors included."""

    async def secured(request: web.Request) -> web.StreamResponse:
        try:
            response = await handler(request)
        except ApiError as exc:
            response = exc.response()
        except AccessDenied as exc:
            response = denial_error(exc).response()
        except Exception as exc:
            response = from_failure(exc, request).response()
        response.headers.update(headers)
        return response

    return secured


def _same_site(request: web.Request) -> None:
    """Refuse a request another site's page made (a form post, a script's fetch)."""
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        raise CROSS_SITE
    origin = request.headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc != request.host:
        raise CROSS_SITE


async def sign_in(request: web.Request) -> web.Response:
    """A session for the presented key: its cookie, its CSRF token (said once) and its end."""
    _same_site(request)
    app = request.app
    principal = await app[PRINCIPALS].authorize(app[POOL], bearer_key(authorization(request.headers)))
    usage = await app[ADMISSIONS].admit(principal)
    if not usage.admitted:
        return refusal(usage).response()
    request[WORKSPACE_KEY] = principal.workspace_id
    timeout = app[CONFIG].db_statement_timeout_s
    opened = await open_session(app[POOL], principal.key_hash, principal.workspace_id, LIFETIME_S, timeout)
    body = {
        "csrf_token": opened.csrf_token,
        "workspace_id": principal.workspace_id,
        "expires_at": opened.expires_at.isoformat().replace("+00:00", "Z"),
    }
    response = web.Response(
        status=201, body=orjson.dumps(body), content_type=JSON, headers={"Cache-Control": "no-store", **usage.headers()}
    )
    response.set_cookie(
        COOKIE, opened.token, max_age=LIFETIME_S, path="/", httponly=True, samesite="Strict", secure=request.secure
    )
    return response


async def sign_out(request: web.Request) -> web.Response:
    """End the request's session (its CSRF token required, as for every session request)."""
    _same_site(request)
    session = await session_of(request)
    request[WORKSPACE_KEY] = session.workspace_id
    await close_session(request.app[POOL], session.token_hash, request.app[CONFIG].db_statement_timeout_s)
    response = web.Response(status=204, headers={"Cache-Control": "no-store"})
    response.del_cookie(COOKIE, path="/")
    return response


async def stream_ticket(request: web.Request) -> web.Response:
    """A single-use ticket for the session's stream connection (``?ticket=`` on the stream),
    after the key's gates and limits, as any request of the session."""
    _same_site(request)
    app = request.app
    if not app[CONFIG].console_stream_url:
        raise ApiError(404, "NOT_FOUND", "No stream is configured for the console (TICKERWIRE_CONSOLE_STREAM_URL).")
    session, principal = await session_principal(request)
    usage = await app[ADMISSIONS].admit(principal)
    if not usage.admitted:
        return refusal(usage).response()
    request[WORKSPACE_KEY] = principal.workspace_id
    ticket = await issue_ticket(app[POOL], session, TICKET_LIFETIME_S, app[CONFIG].db_statement_timeout_s)
    body = {
        "ticket": ticket.token,
        "url": app[CONFIG].console_stream_url,
        "expires_at": ticket.expires_at.isoformat().replace("+00:00", "Z"),
    }
    headers = {"Cache-Control": "no-store", **usage.headers()}
    return web.Response(status=201, body=orjson.dumps(body), content_type=JSON, headers=headers)


def add_console_routes(app: web.Application, base_path: str, stream_url: str) -> None:
    """The page, its assets and its sessions, outside the partner gates (each judges its own caller)."""
    page = page_bytes(base_path, stream_url)
    headers = security_headers(stream_url)
    assets = {name: _file(name) for name in ASSETS}

    async def serve_page(_: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8", headers={"Cache-Control": "no-cache"})

    def asset(name: str) -> Handler:
        async def serve(_: web.Request) -> web.Response:
            return web.Response(body=assets[name], headers={"Content-Type": ASSETS[name], "Cache-Control": "no-cache"})

        return serve

    app.router.add_get(PREFIX, _secured(serve_page, headers), name="console")
    for name in ASSETS:
        app.router.add_get(f"{PREFIX}/{name}", _secured(asset(name), headers), name=f"console:{name}")
    app.router.add_post(PREFIX + "/sessions", _secured(sign_in, headers), name="console:sign_in")
    app.router.add_delete(PREFIX + "/sessions/current", _secured(sign_out, headers), name="console:sign_out")
    app.router.add_post(PREFIX + "/stream-tickets", _secured(stream_ticket, headers), name="console:stream_ticket")
