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
import functools
import gzip

from aiohttp import web

from .catalog import etag_of
from .lru import BoundedLRU

MIN_BYTES = 1400  # about one TCP segment: below it compression saves no round trip
LEVEL = 6
#: Bodies compressed on the request path above this size are compressed in a worker thread.
THREAD_ABOVE = 64 * 1024


def accepts_gzip(header: str | None) -> bool:
    return False if not header else _accepts_gzip(header)


@functools.lru_cache(maxsize=64)  # clients send a handful of distinct values; bounded anyway
def _accepts_gzip(header: str) -> bool:
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

    def __init__(self, max_bytes: int = 64 * 1024 * 1024, max_entries: int = 65_536) -> None:
        self._items: BoundedLRU[bytes] = BoundedLRU(len, max_entries=max_entries, max_bytes=max_bytes)

    def get(self, etag: str) -> bytes | None:
        return self._items.get(etag)

    def put(self, etag: str, data: bytes) -> None:
        if etag not in self._items:
            self._items.put(etag, data)

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


def _is_json(content_type: str | None) -> bool:
    """``response.content_type == "application/json"`` without parsing the header of every response."""
    if content_type == "application/json":  # what the handlers set
        return True
    return content_type is not None and content_type.partition(";")[0].strip().lower() == "application/json"


async def negotiate(request: web.Request, response: web.Response, cache: Compressed) -> web.Response:
    """A 200's representation for the request's ``Accept-Encoding``: gzip (with its own tag) when
    the JSON body is large enough and gzip is accepted; ``Vary`` on every large JSON body."""
    body = response.body
    headers = response.headers
    if not isinstance(body, (bytes, bytearray)) or len(body) < MIN_BYTES or not _is_json(headers.get("Content-Type")):
        return response
    headers["Vary"] = "Accept-Encoding"
    if not accepts_gzip(request.headers.get("Accept-Encoding")):
        return response
    etag = headers.get("ETag") or etag_of(bytes(body))
    response.body = await cache.compress(etag, bytes(body))
    headers["Content-Encoding"] = "gzip"
    headers["ETag"] = gzip_etag(etag)
    return response
