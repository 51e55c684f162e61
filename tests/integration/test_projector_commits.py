"""The projector's sessions ask for synchronous commits themselves, whatever the server's default
(the embedded test server's is ``off``): a batch is visible only once flushed (docs/api.md#durability).
``TICKERWIRE_PROJECTOR_SYNCHRONOUS_COMMIT`` chooses another level; every other pool keeps the
server's setting (real PostgreSQL). Through PgBouncer (``TICKERWIRE_TEST_PGBOUNCER=1``) each
write transaction asks for it instead (``SET LOCAL``)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestServer

from tests.support.apps import config_for
from tickerwire.services.common.db import begin_local, create_pool
from tickerwire.services.projector.app import CONFIG, POOL, create_app

#: The session's synchronous_commit and where it comes from (a session's own setting is "client").
SETTING = "SELECT setting, source FROM pg_settings WHERE name = 'synchronous_commit'"


@pytest.mark.parametrize("level", [None, "remote_apply", "off"])
async def test_the_projectors_pool_commits_as_configured_synchronous_by_default(
    fresh_db, kafka_bootstrap, topic_prefix, level
):
    settings = {} if level is None else {"projector_synchronous_commit": level}
    app = create_app(
        config_for(
            fresh_db,
            kafka_bootstrap_servers=kafka_bootstrap,
            topic_prefix=topic_prefix,
            projector_group=f"{topic_prefix}-projector",
            **settings,
        )
    )  # its own group: no other test's members
    async with TestServer(app):  # runs the app's start-up: its pool, migrations and consumer
        async with app[POOL].acquire() as conn:
            if app[CONFIG].pooled:  # through PgBouncer: asked for by each write transaction (SET LOCAL)
                async with conn.transaction():
                    await begin_local(conn)
                    assert (await conn.fetchrow(SETTING))["setting"] == (level or "on")
            else:  # asked for by the session itself (the server's own default here is off)
                assert tuple(await conn.fetchrow(SETTING)) == (level or "on", "client")
    reader = await create_pool(fresh_db, "rm", min_size=1, max_size=1)
    try:
        async with reader.acquire() as conn:
            assert (await conn.fetchrow(SETTING))["source"] != "client"  # the server's own setting
    finally:
        await reader.close()
