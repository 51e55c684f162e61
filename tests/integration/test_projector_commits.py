"""The projector's sessions commit asynchronously (docs/api.md, "Durability of the read model"),
while every other pool keeps PostgreSQL's synchronous commits (real PostgreSQL)."""

from __future__ import annotations

from aiohttp.test_utils import TestServer

from tests.support.apps import config_for
from tickerwire.services.common.db import create_pool
from tickerwire.services.projector.app import POOL, create_app

#: The session's synchronous_commit and where it comes from (a session's own setting is "client").
SETTING = "SELECT setting, source FROM pg_settings WHERE name = 'synchronous_commit'"


async def test_the_projectors_pool_commits_without_waiting_for_the_wal_flush(fresh_db, kafka_bootstrap, topic_prefix):
    app = create_app(
        config_for(
            fresh_db,
            kafka_bootstrap_servers=kafka_bootstrap,
            topic_prefix=topic_prefix,
            projector_group=f"{topic_prefix}-projector",
        )
    )  # its own group: no other test's members
    async with TestServer(app):  # runs the app's start-up: its pool, migrations and consumer
        async with app[POOL].acquire() as conn:
            assert tuple(await conn.fetchrow(SETTING)) == ("off", "client")  # asked for by the session itself
    reader = await create_pool(fresh_db, "rm", min_size=1, max_size=1)
    try:
        async with reader.acquire() as conn:
            assert (await conn.fetchrow(SETTING))["source"] != "client"  # the server's own setting
    finally:
        await reader.close()
