"""The production shape's pooler: a stack whose pools reach PostgreSQL through PgBouncer in
transaction mode (``TICKERWIRE_DATABASE_URL``) and whose LISTEN, admission and migration
connections bypass it (``TICKERWIRE_DATABASE_DIRECT_URL``) serves reads, pushes a new post
and holds a rate limit (docs/operations.md, PgBouncer)."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta, timezone

import aiohttp
import orjson
import pytest

from tests.support import pgbouncer
from tests.support.events import fresh_post_ev, locale_ev, post_ev
from tests.support.stack import BASE, ServiceStack, auth
from tests.support.ws import session
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.services.common.db import create_pool
from tickerwire.services.common.runtime.errors import ConfigError

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        pgbouncer.binary() is None, reason="pgbouncer is not installed (Debian: apt-get install pgbouncer)"
    ),
]

#: Server connections PgBouncer keeps per database: fewer than the three pools' clients.
POOL_SIZE = 3
#: A rate limit of 10 a minute: the languages polls count too, so they are few.
LANGUAGE_POLLS = 3


async def test_a_stack_through_pgbouncer_serves_reads_pushes_and_limits(pg_dsn, kafka_bootstrap):
    with pgbouncer.Bouncer(pg_dsn, pool_size=POOL_SIZE) as bouncer:
        async with scratch_database(pg_dsn) as dsn:
            stack = ServiceStack(dsn, kafka_bootstrap, "pgbouncer", extra_env=pgbouncer.routed_env(dsn, bouncer))
            assert stack.env()["TICKERWIRE_DATABASE_URL"] == bouncer.url(dsn) != dsn
            await stack.prepare()
            try:
                for name in ("projector", "api", "stream"):
                    await stack.start(name)
                await _serve(stack)
            finally:
                stack.stop_all()
            database = dsn.rpartition("/")[2]
            # Every service logged in to the pooler (the projector, the API, the stream pools).
            logins = re.findall(rf"login attempt: db={database} ", bouncer.log())
            assert len(logins) >= 3, bouncer.log()[-2000:]


async def _serve(stack: ServiceStack) -> None:
    now = datetime.now(timezone.utc)
    await stack.publish(
        [
            locale_ev("en-US", default=True, name="English (United States)"),
            post_ev(1, at=now - timedelta(minutes=2), emitted_at=now),
            post_ev(2, at=now - timedelta(minutes=1), emitted_at=now),
        ]
    )
    key = await stack.provision("ws_pgbouncer", rate_limit_per_minute=10, daily_quota=1_000)
    api, stream = stack.of("api")[0], stack.of("stream")[0]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        # The API refreshes its locale cache within half a second of a projected change.
        for _ in range(LANGUAGE_POLLS):
            async with http.get(f"{api.url}{BASE}/languages", headers=auth(key)) as resp:
                assert resp.status == 200, await resp.text()
                codes = [lang["code"] for lang in (await resp.json())["languages"]]
            if codes:
                break
            await asyncio.sleep(0.1)
        assert codes == ["en-US"]
        async with http.get(f"{api.url}{BASE}/posts", headers=auth(key)) as resp:
            assert resp.status == 200
            assert [p["id"] for p in (await resp.json())["posts"]] == [2, 1]

        async with session(http, f"{stream.url}{BASE}/stream?key={key}") as (ws, ready):
            assert ready["session_id"]
            await stack.publish([fresh_post_ev(3)])
            pushed = orjson.loads((await ws.receive(timeout=15)).data)
        assert (pushed["type"], pushed["data"]["id"]) == ("post.created", 3)

        # The minute's allowance of 10 is used up within a few more requests: then 429.
        statuses = []
        for _ in range(12):
            async with http.get(f"{api.url}{BASE}/categories", headers=auth(key)) as resp:
                statuses.append(resp.status)
                if resp.status == 429:
                    assert (await resp.json())["error"]["code"] == "RATE_LIMITED"
                    break
        assert statuses[-1] == 429 and set(statuses[:-1]) == {200}, statuses


async def test_a_pooler_that_does_not_set_the_read_models_search_path_is_refused_with_the_fix(pg_dsn):
    with pgbouncer.Bouncer(pg_dsn, schema="elsewhere") as bouncer:
        async with scratch_database(pg_dsn) as dsn:
            with pytest.raises(ConfigError, match="connect_query = 'SET search_path = \"rm\", public'"):
                await create_pool(bouncer.url(dsn), "rm", min_size=1, max_size=1, pooled=True)
