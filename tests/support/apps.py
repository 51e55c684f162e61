"""The API and the stream in process, for app tests: a scratch read model filled by the in-process projector
(no broker: the events are handed to ``Projector.apply_records``), a provisioned workspace
with a working key, and ``create_app(config)`` served by aiohttp's ``TestServer`` on loopback,
its operator endpoints on a second ``TestServer`` (as ``run_app`` serves them on the admin port).
The stream app also needs the broker (its feed reads the posts topic): the session's real one.

What only processes show (signals, restarts, listener bounds, admin/partner port separation,
several processes sharing limits) stays in tests/e2e over ``ServiceStack``."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence

import asyncpg
from aiohttp import web
from aiohttp.test_utils import TestServer
from aiokafka import TopicPartition

from tests.support.events import provisioning, records
from tests.support.pgbouncer import routed
from tests.support.projector import projector_on
from tests.support.stack import wait_http
from tests.support.wait import background
from tickerwire.schemas.topics import topic_name
from tickerwire.services.api.app import create_app
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka
from tickerwire.services.common.db import connect
from tickerwire.services.common.operator.admin_listener import ADMIN_APP
from tickerwire.services.projector.sweeper import sweep_once
from tickerwire.services.stream.app import create_app as create_stream_app
from tickerwire.services.webhooks.app import create_app as create_webhooks_app
from tickerwire.services.webhooks.settings import new_signing_key

PREFIX = "tickerwire"
#: Events handed to the projector per batch (its default fetch size).
BATCH = 2000


class ReadModel:
    """A migrated scratch database that events are projected into, in process."""

    def __init__(self, dsn: str, topic_prefix: str = PREFIX) -> None:
        self.dsn, self.topic_prefix = dsn, topic_prefix
        self._offsets: dict[str, int] = defaultdict(int)

    async def conn(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn, server_settings={"search_path": "rm,public"})

    async def project(self, events: Sequence[Any]) -> None:
        """Apply ``events`` in order, each on partition 0 of its own topic, as the projector would."""
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for event in events:
            by_topic[topic_name(self.topic_prefix, type(event).topic)].append(event)
        async with projector_on(self.dsn) as (projector, _, _):
            for topic, evs in by_topic.items():
                for at in range(0, len(evs), BATCH):
                    chunk = records(evs[at : at + BATCH], start=self._offsets[topic])
                    await projector.apply_records(TopicPartition(topic, 0), chunk)
                    self._offsets[topic] += len(chunk)

    async def sweep(self) -> dict[str, str]:
        async with connect(self.dsn, schema="rm") as conn:
            return await sweep_once(conn)

    async def provision(self, workspace_id: str, **limits: Any) -> str:
        """A workspace with an embed, a fresh heartbeat and a key; projected and swept. Returns the key
        (the same events as ``ServiceStack.provision`` publishes)."""
        async with connect(self.dsn, schema="rm") as conn:
            key, events = await provisioning(conn, workspace_id, **limits)
        await self.project(events)
        await self.sweep()
        return key


@dataclass
class Served:
    """An application served in process: its partner origin, its operator origin, the app."""

    url: str
    admin_url: str
    app: web.Application


def config_for(dsn: str, **overrides: Any) -> FullConfig:
    """The frozen configuration of an app under test: no broker unless given, one-node topics."""
    settings: dict[str, Any] = {
        "kafka_bootstrap_servers": "unused:9092",
        "topic_prefix": PREFIX,
        "topic_replication_factor": 1,
    }
    return FullConfig(**{**routed(dsn), **settings, **overrides})


@contextlib.asynccontextmanager
async def served(app: web.Application, ready_within: float = 30.0) -> AsyncIterator[Served]:
    """``app`` and its admin application on loopback, once ``/readyz`` says ready."""
    partner = TestServer(app, host="127.0.0.1")
    await partner.start_server()
    operator = TestServer(app[ADMIN_APP], host="127.0.0.1")
    try:
        await operator.start_server()
        out = Served(str(partner.make_url("")).rstrip("/"), str(operator.make_url("")).rstrip("/"), app)
        await wait_http(f"{out.admin_url}/readyz", timeout=ready_within)
        yield out
    finally:
        await operator.close()
        await partner.close()


@contextlib.asynccontextmanager
async def api_served(dsn: str, **overrides: Any) -> AsyncIterator[Served]:
    async with served(create_app(config_for(dsn, **overrides))) as out:
        yield out


@contextlib.asynccontextmanager
async def stream_served(dsn: str, kafka_bootstrap: str, topic_prefix: str, **overrides: Any) -> AsyncIterator[Served]:
    """The stream app over the real broker: its topics ensured under ``topic_prefix`` first."""
    config = config_for(dsn, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix, **overrides)
    await kafka.ensure_topics(config)
    async with served(create_stream_app(config)) as out:
        yield out


@contextlib.asynccontextmanager
async def dispatcher_served(dsn: str, **overrides: Any) -> AsyncIterator[Served]:
    """The webhook dispatcher in process, once ready (its app has no partner routes)."""
    async with served(create_webhooks_app(config_for(dsn, **overrides))) as out:
        yield out


@contextlib.asynccontextmanager
async def writable_stack(
    dsn: str, bootstrap: str, prefix: str, **overrides: Any
) -> AsyncIterator[tuple[FullConfig, Served]]:
    """The API changing webhook endpoints for real: its topics under ``prefix`` on the broker, a
    projector applying them into ``dsn``, and the API with a signing key and loopback opened
    (``overrides`` win). No dispatcher: nothing is sent. The configuration and the API."""
    settings: dict[str, Any] = {
        "kafka_bootstrap_servers": bootstrap,
        "topic_prefix": prefix,
        "topic_replication_factor": 1,
        "projector_group": f"{prefix}-projector",
        "webhooks_open_targets": "loopback",
        "webhooks_signing_key": new_signing_key(),
        **overrides,
    }
    config = FullConfig(database_url=dsn, **settings)
    await kafka.ensure_topics(config)
    async with (
        projector_on(dsn, **settings) as (projector, _, _),
        background(projector.run()),
        api_served(dsn, **settings) as api,
    ):
        yield config, api
