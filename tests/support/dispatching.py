"""The webhook dispatcher in process for tests (tests/integration): a log written straight into
a real read model (:class:`Log`), the dispatcher's settings and a running dispatcher over them,
and the waits the dispatch tests share."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from datetime import datetime, timezone
from typing import AsyncIterator

import asyncpg

from tests.support.events import locale_ev, post_ev, records
from tests.support.pgbouncer import routed_env
from tests.support.receivers import Receiver
from tickerwire.schemas.models import WebhookEndpoint, WebhookEndpointEvent
from tickerwire.services.common.db import create_pool
from tickerwire.services.common.http.signing import derive_secret
from tickerwire.services.projector.apply import apply_batch
from tickerwire.services.readmodel.taxonomy import served_locales
from tickerwire.services.readmodel.walk import Page, walk
from tickerwire.services.webhooks.dispatcher import Dispatcher
from tickerwire.services.webhooks.metrics import WebhookMetrics
from tickerwire.services.webhooks.sender import Sender
from tickerwire.services.webhooks.settings import WebhooksConfig
from tickerwire.services.webhooks.store import Store
from tickerwire.services.webhooks.worker import WorkerContext

POSTS_TOPIC = "tw.posts.v1"
ACCESS_TOPIC = "tw.access.v1"
KEY = bytes(range(32))
NOW = datetime.now(timezone.utc)
WAIT_S = 20.0


class Log:
    """What the test has written to the log so far: the next offset per topic."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.next: dict[str, int] = {}

    async def apply(self, topic: str, events: list) -> None:
        start = self.next.get(topic, 0)
        await apply_batch(self.conn, topic, 0, records(events, start))
        self.next[topic] = start + len(events)

    async def endpoint(self, endpoint_id: str, url: str, version: int = 1, **fields) -> None:
        data = {"workspace_id": "ws_a", "status": "active", "created_at": NOW, **fields}
        if "start_cursor" not in data:
            data["start_cursor"] = await frontier(self.conn)
        event = WebhookEndpointEvent(
            version=version, emitted_at=NOW, data=WebhookEndpoint(id=endpoint_id, url=url, **data)
        )
        await self.apply(ACCESS_TOPIC, [event])

    async def posts(self, first: int, n: int) -> None:
        await self.apply(POSTS_TOPIC, [post_ev(i) for i in range(first, first + n)])


async def frontier(conn: asyncpg.Connection) -> str:
    page = await walk(conn, POSTS_TOPIC, None, await served_locales(conn), limit=0)
    assert isinstance(page, Page)
    return page.cursor()


def config(dsn: str, **env: str) -> WebhooksConfig:
    return WebhooksConfig.from_env(
        {
            **routed_env(dsn),  # through the session's PgBouncer, if any
            "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": "unused:9092",
            "TICKERWIRE_TOPIC_PREFIX": "tw",
            "TICKERWIRE_WEBHOOKS_SIGNING_KEY": base64.b64encode(KEY).decode(),
            "TICKERWIRE_WEBHOOKS_OPEN_TARGETS": "loopback",
            "TICKERWIRE_WEBHOOKS_RETRY_SCALE": "0.002",
            # The attempt timeout and the lease keep their defaults: they must deliver as they are.
            **env,
        }
    )


@contextlib.asynccontextmanager
async def dispatcher(cfg: WebhooksConfig, owner: str = "test:1") -> AsyncIterator[Dispatcher]:
    pool = await create_pool(cfg.database_url, "rm", min_size=1, max_size=4, stateless=True, pooled=cfg.pooled)
    sender = Sender(timeout_s=cfg.webhooks_attempt_timeout_s, max_connections=10, opened=cfg.open_targets())
    d = Dispatcher(
        WorkerContext(cfg, Store(pool, owner, cfg.webhooks_lease_ttl_s), sender, WebhookMetrics(), POSTS_TOPIC, KEY)
    )
    task = asyncio.create_task(d.run())
    try:
        yield d
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await sender.close()
        await pool.close()


def secret(endpoint_id: str, generation: int = 1) -> bytes:
    return derive_secret(KEY, endpoint_id, generation)


async def until(predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


async def delivery(conn: asyncpg.Connection, endpoint_id: str) -> asyncpg.Record:
    return await conn.fetchrow("SELECT * FROM webhook_deliveries WHERE endpoint_id = $1", endpoint_id)


async def acked(rx: Receiver, n: int) -> bool:
    """Whether ``rx`` has acknowledged ``n`` distinct announcements."""
    return len({r.key for r in rx.acked()}) >= n


async def started_log(conn: asyncpg.Connection) -> Log:
    """A :class:`Log` over ``conn`` whose catalog serves en-US (the dispatch tests' ``log`` fixture)."""
    log = Log(conn)
    await log.apply("tw.catalog.v1", [locale_ev("en-US", default=True)])
    return log
