"""The system under test of the mixed-fault run, all of its own: one Apache Kafka node (its log
on disk, so a restart keeps it), a PostgreSQL primary with one streaming replica that the API
and the stream read from, and a projector (static membership), an API and a stream process.

A supervisor restarts every service process that dies, on the same port and, for the
projector, with the same group instance id, as systemd or Kubernetes would.

The services reach the primary, the replica and Kafka through a :class:`~tests.support.links.Link`
each, which the nemesis cuts (a partition) or slows (added latency); the workload, the checker
and the replica's own streaming from the primary go direct, so only the services' network
breaks. Kafka tells its clients in its metadata where to find the broker (its advertised
listener), and a client then connects there, not to the address it bootstrapped from: a link
that rewrote nothing would be left after the first metadata answer. So the node has a second
listener, ``SERVICES``, on a port of its own, advertised as the link's address: the services
bootstrap from the link and are sent back to it; the workload's producers use the ordinary
listener and never touch the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

from tests.chaos.history import History
from tests.conftest import TEST_KAFKA_SETTINGS
from tests.support.events import locale_ev, token_ev
from tests.support.links import Link
from tests.support.replicas import database_on
from tests.support.stack import Service, ServiceStack, wait_http
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.ports import free_port
from tickerwire.devstack.embedded.postgres import (
    PRIMARY_REPLICATION_SETTINGS,
    EmbeddedPostgres,
    EmbeddedReplica,
    with_database,
)
from tickerwire.services.common.db import connect

ROLES = ("projector", "api", "stream")
LOCALES = ("en-US", "de-DE", "fr-FR")
TICKERS = ("BTC", "ETH")
#: The projector's static group membership: a restart takes its partitions back at once.
INSTANCE_ID = "chaos-projector-1"
SUPERVISE_EVERY_S = 0.25


@dataclass
class Cluster:
    root: Path
    kafka: ApacheKafka
    primary: EmbeddedPostgres
    replica: EmbeddedReplica
    stack: ServiceStack
    #: The services' way to each server ("primary", "replica", "kafka").
    links: dict[str, Link]
    #: What the services are given instead of the stack's addresses: the links'.
    service_env: dict[str, str]
    key: str = ""
    #: The process currently serving each role (the supervisor replaces a dead one).
    current: dict[str, Service] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return self.current["api"].url

    @property
    def stream_url(self) -> str:
        return self.current["stream"].url

    def spawn(self, role: str) -> Service:
        old = self.current.get(role)
        extra = dict(self.service_env)
        if role == "projector":
            extra["TICKERWIRE_PROJECTOR_GROUP_INSTANCE_ID"] = INSTANCE_ID
        service = self.stack.spawn(role, port=old.port if old else None, **extra)
        self.current[role] = service
        return service

    async def supervise(self, history: History) -> None:
        """Restart each service process that exited, for ever (cancelled at the end of the run)."""
        while True:
            for role, service in list(self.current.items()):
                if service.proc.poll() is not None:
                    self.spawn(role)
                    history.restarts.append((role, history.now()))
            await asyncio.sleep(SUPERVISE_EVERY_S)

    async def ready(self, role: str, timeout: float = 60.0) -> None:
        service = self.current[role]
        await wait_http(f"{service.admin_url}/readyz", service, timeout=timeout)

    async def dead_letters(self) -> int:
        async with connect(self.stack.database_url, schema="rm") as conn:
            return int(await conn.fetchval("SELECT count(*) FROM dead_letters"))


@contextlib.asynccontextmanager
async def cluster(prefix: str = "chaos") -> AsyncIterator[Cluster]:
    """Everything started, locales and a token projected, a key with room to spare; all stopped after."""
    root = Path(tempfile.mkdtemp(prefix="tickerwire-chaos-"))
    services_port = free_port()
    links = {"kafka": Link(f"127.0.0.1:{services_port}")}
    # The services' own listener, advertised as the link in front of it: only they go through it.
    kafka = ApacheKafka(
        root / "kafka",
        settings=TEST_KAFKA_SETTINGS,
        listeners={"SERVICES": (services_port, links["kafka"].address)},
    )
    # Ports of their own from the start: a restarted server is found at the same address.
    primary = EmbeddedPostgres(root / "primary", port=free_port(), settings=PRIMARY_REPLICATION_SETTINGS)
    replica: EmbeddedReplica | None = None
    stack: ServiceStack | None = None
    try:
        await asyncio.to_thread(kafka.start)
        await asyncio.to_thread(primary.start)
        replica = EmbeddedReplica(primary.dsn, root / "replica", port=free_port())
        await asyncio.to_thread(replica.start)
        read_url = with_database(replica.dsn, primary.dsn.rpartition("/")[2])
        await database_on(read_url)
        links["primary"] = Link(urlsplit(primary.dsn).netloc.rpartition("@")[2])
        links["replica"] = Link(urlsplit(read_url).netloc.rpartition("@")[2])
        for link in links.values():
            link.start()
        env = {"TICKERWIRE_STREAM_PING_INTERVAL_S": "1", "TICKERWIRE_DB_POOL_MAX": "10"}
        stack = ServiceStack(primary.dsn, kafka.bootstrap_servers, prefix, extra_env=env, log_dir=root / "logs")
        stack.log_dir.mkdir()
        await stack.prepare()
        await stack.publish(
            [locale_ev(code, default=code == "en-US") for code in LOCALES] + [token_ev(t) for t in TICKERS]
        )
        service_env = {
            "TICKERWIRE_DATABASE_URL": through(primary.dsn, links["primary"]),
            "TICKERWIRE_DATABASE_READ_URLS": through(read_url, links["replica"]),
            "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": links["kafka"].address,
        }
        found = Cluster(root, kafka, primary, replica, stack, links, service_env)
        for role in ROLES:
            found.spawn(role)
        for role in ROLES:
            await found.ready(role)
        found.key = await stack.provision(
            f"ws_{prefix}", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000, stream_connection_limit=50
        )
        yield found
    finally:
        if stack is not None:
            stack.stop_all()
        for link in links.values():
            link.stop()
        for server in (replica, primary, kafka):
            if server is not None:
                await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)


def through(dsn: str, link: Link) -> str:
    """``dsn`` with its host and port replaced by the link's."""
    parts = urlsplit(dsn)
    userinfo = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{link.address}" if userinfo else link.address))
