"""gzip for large JSON bodies (RFC 9110 8.4 / 12.5.3), compressed once per body.

A 200 whose JSON body is at least ``MIN_BYTES`` long is sent gzip-encoded when the request's
``Accept-Encoding`` accepts gzip (``gzip`` or ``*`` with a non-zero q). Every such response
carries ``Vary: Accept-Encoding``, compressed or not. The gzip representation has its own
strong entity tag (the identity tag with ``-gzip`` inside the quotes), so a conditional request
revalidates the representation it cached.

Compressed bytes are cached by entity tag (a hash of the exact identity body) in a bounded LRU,
so a body that does not change (``/tokens`` between two stamps, a cached page) is compressed
once; :meth:`Compressed.warm` pre-compresses a body off the event loop when the catalog reloads.
Brotli is not offered: no brotli package is part of the product's dependencies.
"""

from __future__ import annotations

import asyncio
import gzip
from collections import OrderedDict

from aiohttp import web

from .catalog import etag_of

MIN_BYTES = 1400  # about one TCP segment: below it compression saves no round trip
LEVEL = 6
#: Bodies compressed on the request path above this size are compressed in a worker thread.
THREAD_ABOVE = 64 * 1024


def accepts_gzip(header: str | None) -> bool:
    if not header:
        return False
    star = None
    for item in header.split(","):
        name, _, params = item.strip().partition(";")
        name = name.strip().lower()
        q = 1.0
        for p in params.split(";"):
            k, _, v = p.strip().partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        if name in ("gzip", "x-gzip"):
            return q > 0
        if name == "*":
            star = q > 0
    return bool(star)


def gzip_etag(etag: str) -> str:
    return etag[:-1] + '-gzip"' if etag.endswith('"') else etag


class Compressed:
    """identity ETag -> gzip bytes, least recently used dropped beyond ``max_bytes``."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._max = max_bytes
        self._size = 0
        self._items: OrderedDict[str, bytes] = OrderedDict()

    def get(self, etag: str) -> bytes | None:
        data = self._items.get(etag)
        if data is not None:
            self._items.move_to_end(etag)
        return data

    def put(self, etag: str, data: bytes) -> None:
        if etag in self._items or len(data) > self._max:
            return
        self._items[etag] = data
        self._size += len(data)
        while self._size > self._max:
            _, old = self._items.popitem(last=False)
            self._size -= len(old)

    async def compress(self, etag: str, body: bytes) -> bytes:
        data = self.get(etag)
        if data is None:
            if len(body) > THREAD_ABOVE:
                data = await asyncio.to_thread(gzip.compress, body, LEVEL, mtime=0)
            else:
                data = gzip.compress(body, LEVEL, mtime=0)
            self.put(etag, data)
        return data

    async def warm(self, etag: str, body: bytes) -> None:
        if len(body) >= MIN_BYTES:
            await self.compress(etag, body)


async def negotiate(request: web.Request, response: web.Response, cache: Compressed) -> web.Response:
    """A 200's representation for the request's ``Accept-Encoding``: gzip (with its own tag) when
    the JSON body is large enough and gzip is accepted; ``Vary`` on every large JSON body."""
    body = response.body
    if not isinstance(body, (bytes, bytearray)) or len(body) < MIN_BYTES or response.content_type != "application/json":
        return response
    headers = response.headers
    headers["Vary"] = "Accept-Encoding"
    if not accepts_gzip(request.headers.get("Accept-Encoding")):
        return response
    etag = headers.get("ETag") or etag_of(bytes(body))
    response.body = await cache.compress(etag, bytes(body))
    headers["Content-Encoding"] = "gzip"
    headers["ETag"] = gzip_etag(etag)
    return response
