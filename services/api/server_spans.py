"""The API's SERVER spans (tracing on; off, this middleware is not installed): one per request,
named ``<METHOD> <route template>`` (``GET /api/v1/developer/posts/{id_or_slug}``: never the
path with its ids), a trace of its own. A ``traceparent`` the partner sent is not trusted as a
parent: it becomes a link. The statements the handler runs are CLIENT spans beneath it
(:func:`.state.db`, :mod:`..common.db.traced`)."""

from __future__ import annotations

from aiohttp import web

from ..common.http.envelope import Handler
from ..common.tracing import ROOT, Kind, Tracing


def server_spans(tracing: Tracing):
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        template = resource.canonical if resource is not None else None
        attributes = {"http.request.method": request.method, "url.path": request.path, "url.scheme": request.scheme}
        if template is not None:
            attributes["http.route"] = template
        name = f"{request.method} {template}" if template is not None else request.method
        partner = tracing.extract(request.headers)
        with tracing.start(name, Kind.SERVER, ROOT, (partner,) if partner else (), attributes) as span:
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # a redirect, sent by aiohttp
                span.set_attribute("http.response.status_code", exc.status)
                raise
            span.set_attribute("http.response.status_code", response.status)
            if response.status >= 500:
                span.set_attribute("error.type", str(response.status))
                span.fail(f"HTTP {response.status}")
            return response

    return middleware
