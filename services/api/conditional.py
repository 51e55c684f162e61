"""Conditional GETs (RFC 9110 section 13): a strong ETag on every 200, 304 on a matching If-None-Match.

Applied by the request path (:mod:`.pipeline`) to every 200 of a partner route.

A handler may set the ETag itself (pre-serialized bodies carry a precomputed one);
otherwise it is the quoted hash of the body bytes. If-None-Match uses the weak comparison
function, as RFC 9110 13.1.2 requires: ``W/"x"`` matches ``"x"``, and ``*`` matches any.
"""

from __future__ import annotations

import re

from aiohttp import web

from .catalog import etag_of

_TAG = re.compile(r'\s*(?:W/)?("[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)')


def opaque_tags(header: str) -> set[str] | None:
    """The opaque tags of an If-None-Match value (``W/`` dropped); None for ``*``."""
    if header.strip() == "*":
        return None
    tags: set[str] = set()
    pos = 0
    while pos < len(header):
        m = _TAG.match(header, pos)
        if m is None:  # an unparsable member: skip to the next comma
            nxt = header.find(",", pos)
            if nxt < 0:
                break
            pos = nxt + 1
            continue
        tags.add(m.group(1))
        pos = m.end()
    return tags


def matches(if_none_match: str, etag: str) -> bool:
    tags = opaque_tags(if_none_match)
    return True if tags is None else etag.removeprefix("W/") in tags


def evaluate(request: web.Request, response: web.Response) -> web.Response:
    """A 200 as the request's condition leaves it: with its strong ETag, or a 304 carrying the
    validators (ETag, Cache-Control, Vary) when ``If-None-Match`` matches."""
    headers = response.headers
    etag = headers.get("ETag")
    if etag is None:
        body = response.body
        if not isinstance(body, (bytes, bytearray)):
            return response
        etag = etag_of(bytes(body))
        headers["ETag"] = etag
    condition = request.headers.get("If-None-Match")
    if condition is not None and request.method in ("GET", "HEAD") and matches(condition, etag):
        keep = {k: headers[k] for k in ("ETag", "Cache-Control", "Vary") if k in headers}
        return web.Response(status=304, headers=keep)
    return response
