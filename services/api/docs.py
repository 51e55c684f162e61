"""Browsable documentation at ``{base_url}/docs``: Swagger UI rendering the served OpenAPI document.

The Swagger UI assets come from the ``swagger-ui-py`` package (its ``static`` folder, Swagger
UI 5, which renders OpenAPI 3.1) and are served by this process under ``{base_url}/docs/``:
the page loads nothing from any other origin, and its Content-Security-Policy says so, so it
works offline and behind firewalls. Like ``/openapi.json``, the page and its assets need no
key and count against no limit. Every URL in the page is relative, so the docs work under
any base path or proxy prefix.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from aiohttp import web

from ..common.runtime.errors import ConfigError

#: The files of the package the page uses, by the name they are served under.
ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}
ASSET_CACHE = "public, max-age=86400"

#: Swagger UI's own configuration, a file rather than an inline script, so the policy can
#: forbid inline scripts. The page fetches the document ("openapi.json") next to itself; "Try it out" calls the
#: document's server (this deployment's base path) with the key given under "Authorize".
INIT_JS = b"""window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    docExpansion: "list",
    defaultModelsExpandDepth: 0,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout"
  });
};
"""

PAGE = b"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Tickerwire Developer Read API</title>
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <link rel="stylesheet" href="docs/swagger-ui.css">
  <link rel="icon" type="image/png" href="docs/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="docs/swagger-ui-bundle.js"></script>
  <script src="docs/init.js"></script>
</body>
</html>
"""

#: Same origin only: no CDN, no font or image service, no validator badge. Swagger UI sets
#: style attributes (hence 'unsafe-inline' for styles only) and shows data: images.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def static_dir() -> Path:
    """The ``static`` folder of the installed swagger-ui-py package; refuses to start without it."""
    spec = importlib.util.find_spec("swagger_ui")
    folder = Path(next(iter(spec.submodule_search_locations or []), "")) / "static" if spec else None
    if folder is None or not all((folder / name).is_file() for name in ASSETS):
        raise ConfigError(
            "the swagger-ui-py package (Swagger UI assets for /docs) is not installed; pip install swagger-ui-py"
        )
    return folder


def add_docs_routes(app: web.Application, base: str) -> None:
    """``{base}/docs`` and its assets, outside the partner gates (no key, no limit)."""
    folder = static_dir()

    async def page(_: web.Request) -> web.Response:
        return web.Response(
            body=PAGE,
            content_type="text/html",
            charset="utf-8",
            headers={"Cache-Control": "public, max-age=300", "Content-Security-Policy": PAGE_POLICY},
        )

    async def init(_: web.Request) -> web.Response:
        return web.Response(
            body=INIT_JS, content_type="text/javascript", headers={"Cache-Control": "public, max-age=300"}
        )

    def asset(path: Path, content_type: str):
        async def serve(_: web.Request) -> web.FileResponse:
            return web.FileResponse(path, headers={"Content-Type": content_type, "Cache-Control": ASSET_CACHE})

        return serve

    app.router.add_get(base + "/docs", page, name="docs")
    app.router.add_get(base + "/docs/init.js", init, name="docs:init")
    for n, (name, content_type) in enumerate(ASSETS.items()):
        app.router.add_get(f"{base}/docs/{name}", asset(folder / name, content_type), name=f"docs:asset{n}")
