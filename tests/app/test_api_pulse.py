"""GET /sentiment-pulse is cacheable: its ETag follows its content, so a partner polling it
with If-None-Match gets 304 until a count changes or the window moves (once a minute)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import aiohttp

from tests.support.apps import ReadModel, api_served
from tests.support.events import locale_ev, post_ev
from tests.support.stack import BASE, auth
from tickerwire.devstack.embedded.postgres import scratch_database


async def pulse(
    http: aiohttp.ClientSession, url: str, key: str, etag: str | None = None
) -> tuple[int, str, dict | None]:
    headers = {**auth(key), **({"If-None-Match": etag} if etag else {})}
    async with http.get(f"{url}{BASE}/sentiment-pulse", headers=headers) as resp:
        return resp.status, resp.headers["ETag"], (await resp.json() if resp.status == 200 else None)


async def test_the_pulse_answers_304_until_a_count_changes(pg_dsn):
    now = datetime.now(timezone.utc)
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn)
        await model.project([locale_ev("en-US", default=True), post_ev(1, at=now - timedelta(hours=1))])
        key = await model.provision("ws_pulse")
        async with api_served(dsn) as api, aiohttp.ClientSession() as http:
            for _ in range(3):  # a minute may turn between the two requests: then once more
                status, etag, doc = await pulse(http, api.url, key)
                assert status == 200 and doc is not None
                as_of = datetime.fromisoformat(doc["as_of"].replace("Z", "+00:00"))
                assert (as_of.second, as_of.microsecond) == (0, 0) and as_of <= datetime.now(timezone.utc)
                again, again_etag, _ = await pulse(http, api.url, key, etag)
                if again == 304:
                    break
                assert again == 200 and again_etag != etag
                _, _, now_doc = await pulse(http, api.url, key)
                assert now_doc is not None and now_doc["as_of"] != doc["as_of"], "a 200 for the same content"
            assert again == 304 and again_etag == etag and doc["total_posts"] == 1
            # A post counted: a new body, a new ETag, a 200 for the old one.
            await model.project([post_ev(2, at=datetime.now(timezone.utc) - timedelta(minutes=5), sentiment="BEARISH")])
            status, new_etag, doc = await pulse(http, api.url, key, etag)
            assert status == 200 and new_etag != etag and doc is not None
            assert doc["total_posts"] == 2 and doc["breakdown"]["BEARISH"]["count"] == 1
