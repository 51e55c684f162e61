"""``{base_url}/docs``: the API process (in process, over a real PostgreSQL) serves Swagger UI
from a local package, with every asset on its own origin; a headless Chromium that can reach
nothing but loopback renders the served OpenAPI document."""

from __future__ import annotations

import asyncio
import html.parser
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from tests.support.stack import BASE
from tickerwire.services.api.app import create_app
from tickerwire.services.cli.settings import FullConfig

DOC = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"


class References(html.parser.HTMLParser):
    """Every URL a page makes the browser load: scripts, stylesheets, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.urls.append(a["src"])
        if tag == "link" and a.get("href"):
            self.urls.append(a["href"])
        if tag in ("img", "iframe", "source") and a.get("src"):
            self.urls.append(a["src"])


@pytest.fixture
async def api(fresh_db):
    server = TestServer(
        create_app(FullConfig(database_url=fresh_db, kafka_bootstrap_servers="unused:9092")), host="127.0.0.1"
    )
    await server.start_server()
    try:
        yield str(server.make_url(""))
    finally:
        await server.close()


async def test_every_asset_of_the_page_is_served_locally_without_a_key(api):
    page_url = f"{api}{BASE}/docs"
    async with aiohttp.ClientSession() as http:
        async with http.get(page_url) as resp:  # no key
            assert resp.status == 200 and resp.content_type == "text/html"
            policy = resp.headers["Content-Security-Policy"]
            assert "X-RateLimit-Limit" not in resp.headers and "RateLimit" not in resp.headers  # counts nothing
            parser = References()
            parser.feed(await resp.text())
        assert len(parser.urls) >= 3
        for ref in [*parser.urls, "openapi.json"]:
            url = urljoin(page_url, ref)
            assert urlsplit(url).netloc == urlsplit(api).netloc, ref  # same origin: no CDN
            async with http.get(url) as resp:
                body = await resp.read()
                assert resp.status == 200 and len(body) > 0, (ref, resp.status)
                if ref.endswith(".js"):
                    assert resp.content_type == "text/javascript"
                    assert b"https://" not in body or ref.endswith("bundle.js")  # our own code names no other origin
        async with http.get(f"{api}{BASE}/openapi.json") as resp:
            assert resp.status == 200
    assert "default-src 'none'" in policy and "script-src 'self'" in policy and "connect-src 'self'" in policy


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


async def _headless(browser: str, url: str, *args: str) -> tuple[bytes, str]:
    """Chromium that can reach loopback only: every other host fails DNS and a dead proxy.
    Returns what it printed and its log (the page's console messages among it)."""
    with tempfile.TemporaryDirectory() as profile:
        proc = await asyncio.create_subprocess_exec(
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--proxy-server=http://127.0.0.1:9",
            "--virtual-time-budget=15000",
            "--window-size=1280,1600",
            "--enable-logging=stderr",
            "--v=0",
            *args,
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out, err.decode(errors="replace")


def console_messages(log: str) -> list[str]:
    """What the page wrote to its console, from Chromium's log (``...:CONSOLE:...`` lines: errors,
    warnings and uncaught exceptions alike). A page that works says nothing there."""
    return [line for line in log.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(_chromium() is None, reason="no Chromium installed (apt-get install chromium) to render /docs")
async def test_docs_render_in_a_headless_browser_without_network(api, tmp_path):
    browser = _chromium()
    url = f"{api}{BASE}/docs"
    out, log = await _headless(browser, url, "--dump-dom")
    dom = out.decode()
    assert console_messages(log) == [], console_messages(log)
    doc = orjson.loads(DOC.read_bytes())
    # Swagger UI has rendered the served document: its title, every tag and every operation.
    assert doc["info"]["title"] in dom
    for tag in doc.get("tags", []):
        assert f'data-tag="{tag["name"]}"' in dom, tag["name"]
    for path, item in doc["paths"].items():
        assert f'data-path="{path}"' in dom, path
        for method, operation in item.items():
            if isinstance(operation, dict) and "summary" in operation:
                assert operation["summary"] in dom, (method, path)
    shot = tmp_path / "docs.png"
    await _headless(browser, url, f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")
