"""Serves the OpenAPI 3.1 contract (``schemas/openapi.json``) at ``{base_url}/openapi.json``.

The document is read once at start-up; its ``servers`` entry is set to this process's base
path (a relative URL, resolved against the document's own address).
"""

from __future__ import annotations

from importlib import resources

import orjson
from aiohttp import web

from .catalog import Body


def load_document() -> dict:
    return orjson.loads((resources.files("tickerwire.schemas") / "openapi.json").read_bytes())


def handler(base_path: str):
    doc = load_document()
    doc["servers"] = [{"url": base_path, "description": "This deployment"}]
    body = Body.of(doc)

    async def openapi(_: web.Request) -> web.Response:
        return web.Response(
            body=body.data,
            content_type="application/json",
            headers={"Cache-Control": "public, max-age=300", "ETag": body.etag},
        )

    return openapi
