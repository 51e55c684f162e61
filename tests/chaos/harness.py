"""The system under test of the mixed-fault run, all of its own, in one of two shapes
(:data:`SHAPES`): one Apache Kafka node and one api and one stream process (``single``), or
the production shape (``production``): three Kafka nodes (a KRaft quorum, topics at
replication factor 3 with ``min.insync.replicas=2``) and two api and two stream processes,
each pair sharing one partner port (``TICKERWIRE_PORT_SHARING``: the kernel spreads the
partners' connections over both; docs/operations.md#several-processes-on-one-port). Kafka
keeps its log on disk, so a restarted node keeps it. Both shapes have two PostgreSQL servers, one the primary and the other its
streaming standby (synchronous replication: :data:`SERVER_SETTINGS`), and a projector (static
membership), an API, a stream process and two webhook dispatchers (:data:`WEBHOOKS_ENV`: a
signing key, private targets allowed, the retry schedule compressed as in
tests/e2e/test_webhook_delivery.py).

The servers' roles can swap: :meth:`Cluster.fail_over` kills the primary, promotes the standby
and rebuilds the old primary as the new one's standby (a fresh copy: it never comes back as a
second primary). So the services are not told which is which: ``TICKERWIRE_DATABASE_URL`` is a
multi-host URL naming both servers with ``target_session_attrs=read-write`` (they connect to the
one that takes writes), and ``TICKERWIRE_DATABASE_READ_URLS`` names both servers too, each
alone: the replica monitor keeps the one that is in recovery (the standby) in the read rotation
and leaves the other out ("not a replica"), whichever that is at the time.

A supervisor restarts every service process that dies, on the same port and, for the
projector, with the same group instance id, as systemd or Kubernetes would.

The services reach each PostgreSQL server and Kafka through a :class:`~tests.support.links.Link`
each, which the nemesis cuts (a partition) or slows (added latency), choosing the link by the
role the server has when the fault starts (:meth:`Cluster.link`); the workload, the checker and
the standby's own streaming from the primary go direct, so only the services' network breaks.
Kafka tells its clients in its metadata where to find the broker (its advertised listener), and
a client then connects there, not to the address it bootstrapped from: a link that rewrote
nothing would be left after the first metadata answer. So each node has a second listener,
``SERVICES``, on a port of its own, advertised as its link's address: the services bootstrap
from the links and are sent back to them; the workload's producers use the ordinary listener and
never touch a link. The nodes replicate among themselves on the ordinary listener too, so
cutting one node's link cuts the services off from it, not the node from its quorum (a node
cut from its peers is what ``pause broker`` shows: tests/chaos/nemesis.py).

PgBouncer is not in this picture: it names one server, so it would not follow a failover by
itself (docs/operations.md#pgbouncer), and the failover is what this run exercises most.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Mapping, Union
from urllib.parse import urlsplit, urlunsplit

from tests.chaos.history import History
from tests.support.brokers import TEST_KAFKA_SETTINGS
from tests.support.events import locale_ev, token_ev
from tests.support.links import Link
from tests.support.replicas import database_on, signal_server, wait_gone
from tests.support.stack import Service, ServiceStack, wait_http
from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.ports import free_port
from tickerwire.devstack.embedded.postgres import (
    REPLICA_SETTINGS,
    SYNCHRONOUS_PRIMARY_SETTINGS,
    EmbeddedPostgres,
    EmbeddedReplica,
)
from tickerwire.services.common.db import connect
from tickerwire.services.common.http.signing import derive_secret

#: The two webhook dispatchers, each a role of its own (the supervisor restarts each).
DISPATCHERS = ("dispatcher0", "dispatcher1")


def processes(service: str, count: int) -> tuple[str, ...]:
    """The roles of ``count`` processes of ``service``: ``api``, ``api-2``, ``api-3``, ..."""
    return tuple(service if n == 1 else f"{service}-{n}" for n in range(1, count + 1))


@dataclass(frozen=True)
class Shape:
    """How many Kafka nodes (1 or 3), api processes and stream processes a run has."""

    name: str
    brokers: int
    apis: int
    streams: int

    @property
    def roles(self) -> tuple[str, ...]:
        """Every service process by its role: ``api``, ``api-2``, ... share one port."""
        return ("projector", *processes("api", self.apis), *processes("stream", self.streams), *DISPATCHERS)

    def describe(self) -> str:
        kafka = "one KRaft node" if self.brokers == 1 else f"{self.brokers} KRaft nodes, topics at replication factor 3"
        return f"Apache Kafka ({kafka}, logs on disk); {self.apis} api and {self.streams} stream process(es)"


SINGLE = Shape("single", brokers=1, apis=1, streams=1)
PRODUCTION = Shape("production", brokers=3, apis=2, streams=2)
SHAPES = {shape.name: shape for shape in (SINGLE, PRODUCTION)}
#: The roles of the single shape (the default).
ROLES = SINGLE.roles
#: The workspaces whose limits the production shape's run checks across processes: a stream
#: connection limit of 5 (six clients try), and a rate limit of 60 a minute (spent three
#: times over). Each has its own key.
CAPPED_WORKSPACE, CAPPED_LIMIT = "ws_chaoscap", 5
RATED_WORKSPACE, RATED_LIMIT = "ws_chaosrate", 60
SIGNING_KEY = base64.b64encode(bytes(range(32))).decode()
WEBHOOKS_ENV = {
    "TICKERWIRE_WEBHOOKS_SIGNING_KEY": SIGNING_KEY,
    "TICKERWIRE_WEBHOOKS_OPEN_TARGETS": "loopback",
    # 5 s, 5 min, 30 min, 2 h, ... become 10 ms, 0.6 s, 3.6 s, 14.4 s, ...
    "TICKERWIRE_WEBHOOKS_RETRY_SCALE": "0.002",
    "TICKERWIRE_WEBHOOKS_ATTEMPT_TIMEOUT_S": "1",
    "TICKERWIRE_WEBHOOKS_LEASE_TTL_S": "3",
}
LOCALES = ("en-US", "de-DE", "fr-FR")
TICKERS = ("BTC", "ETH")
#: The projector's static group membership: a restart takes its partitions back at once.
INSTANCE_ID = "chaos-projector-1"
SUPERVISE_EVERY_S = 0.25
#: The two PostgreSQL servers; the first starts as the primary.
SERVERS = ("pg0", "pg1")
#: Every server's settings, whatever its role: synchronous replication (a primary's commits made
#: with ``synchronous_commit`` on wait for the standby; the standby ignores it) and hot standby
#: (a primary ignores it), so a server changes role without a change of settings. The standby
#: that counts is named (its ``cluster_name``), not ``'*'``: while a standby is rebuilt,
#: ``pg_basebackup``'s WAL stream would count as one.
SERVER_SETTINGS: Mapping[str, str] = {
    **SYNCHRONOUS_PRIMARY_SETTINGS,
    **REPLICA_SETTINGS,
    "synchronous_standby_names": f"ANY 1 ({', '.join(SERVERS)})",
}


Kafka = Union[ApacheKafka, ApacheKafkaCluster]


@dataclass
class Cluster:
    root: Path
    kafka: Kafka
    #: The PostgreSQL servers by name (:data:`SERVERS`); a failover replaces the old primary's
    #: object with the standby rebuilt on its data directory and port.
    servers: dict[str, EmbeddedPostgres]
    #: The name of the server that is the primary now.
    primary_name: str
    stack: ServiceStack
    #: The services' way to each server (by its name) and to Kafka ("kafka").
    links: dict[str, Link]
    #: What the services are given instead of the stack's addresses: the links'.
    service_env: dict[str, str]
    key: str = ""
    #: The workspace of ``key`` (and of the webhook endpoints).
    workspace_id: str = ""
    #: The process currently serving each role (the supervisor replaces a dead one).
    current: dict[str, Service] = field(default_factory=dict)
    #: Settings of every server on top of :data:`SERVER_SETTINGS` (a rebuilt standby's too).
    server_settings: Mapping[str, str] = field(default_factory=dict)
    shape: Shape = SINGLE
    #: Keys of the workspaces whose limits are checked (by workspace id).
    limited_keys: dict[str, str] = field(default_factory=dict)

    @property
    def roles(self) -> tuple[str, ...]:
        return self.shape.roles

    def processes(self, service: str) -> tuple[str, ...]:
        """The roles running ``service`` (the dispatcher's: both dispatchers)."""
        return tuple(role for role in self.roles if service_of(role) == service)

    @property
    def nodes(self) -> list[ApacheKafka]:
        """The Kafka nodes (one, or the cluster's three)."""
        return list(self.kafka.nodes) if isinstance(self.kafka, ApacheKafkaCluster) else [self.kafka]

    def node_link(self, node: ApacheKafka) -> Link:
        """The services' link to one Kafka node."""
        return self.links["kafka" if len(self.nodes) == 1 else f"kafka{node.node_id}"]

    @property
    def primary(self) -> EmbeddedPostgres:
        return self.servers[self.primary_name]

    @property
    def standby_name(self) -> str:
        return next(name for name in self.servers if name != self.primary_name)

    @property
    def replica(self) -> EmbeddedPostgres:
        """The standby now (the services read from it)."""
        return self.servers[self.standby_name]

    def link(self, target: str) -> Link:
        """The services' link to ``target``: "primary" or "replica" (the server that has that
        role now), or "kafka"."""
        name = {"primary": self.primary_name, "replica": self.standby_name}.get(target, target)
        return self.links[name]

    @property
    def api_url(self) -> str:
        return self.current["api"].url

    @property
    def stream_url(self) -> str:
        return self.current["stream"].url

    def spawn(self, role: str) -> Service:
        """Start the process of ``role`` on its port (the port of its service's other
        processes, when they share one)."""
        old = self.current.get(role)
        extra = dict(self.service_env)
        if role == "projector":
            extra["TICKERWIRE_PROJECTOR_GROUP_INSTANCE_ID"] = INSTANCE_ID
        siblings = [self.current[r] for r in self.processes(service_of(role)) if r in self.current]
        if len(self.processes(service_of(role))) > 1 and service_of(role) in ("api", "stream"):
            extra["TICKERWIRE_PORT_SHARING"] = "true"
            port = siblings[0].port if siblings else None
        else:
            port = old.port if old else None
        service = self.stack.spawn(service_of(role), port=port, **extra)
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

    # ------------------------------------------------------------------ PostgreSQL faults

    def crash_primary(self) -> None:
        """SIGKILL of the primary's postmaster and every process of it (shared memory, and the
        WAL not yet written from it, gone), then the server started again on the same data:
        crash recovery, as after an OOM kill or a container's death."""
        primary = self.primary
        wait_gone(signal_server(primary, signal.SIGKILL))
        primary.stop()  # reaps the postmaster
        primary.start()

    def kill_primary(self) -> str:
        """SIGKILL of the primary and every process of it, left down; its name."""
        wait_gone(signal_server(self.primary, signal.SIGKILL))
        self.primary.stop()
        return self.primary_name

    def lose_standby_tail(self) -> None:
        """SIGKILL of the standby's processes and a start again on its data (still a standby):
        what it had received from the primary but not written is gone (after a freeze, the WAL
        sent to it meanwhile, held in its socket's buffer). With the primary dead too, it
        comes back as far as it had got: a standby with that much replay lag."""
        standby = self.replica
        wait_gone(signal_server(standby, signal.SIGKILL))
        standby.stop()
        standby.start()

    def promote_standby(self) -> None:
        """The standby promoted (``pg_promote``): the primary from now on."""
        standby = self.replica
        assert isinstance(standby, EmbeddedReplica)
        standby.promote()
        self.primary_name = self.standby_name

    def rebuild(self, name: str) -> None:
        """The stopped server ``name`` wiped and started as a fresh standby of the primary."""
        fresh = self.servers[name].standby_of(self.primary.dsn, settings=settings_of(name, self.server_settings))
        self.servers[name] = fresh
        fresh.start()

    def fail_over(self) -> None:
        """The primary killed, the standby promoted, the old primary rebuilt as its standby."""
        old = self.kill_primary()
        self.promote_standby()
        self.rebuild(old)


def service_of(role: str) -> str:
    """The service a role runs: ``dispatcher0`` and ``dispatcher1`` are both the dispatcher,
    ``api-2`` is an api."""
    return "dispatcher" if role in DISPATCHERS else role.partition("-")[0]


def webhook_secret(endpoint_id: str) -> bytes:
    """The secret the dispatchers sign an endpoint's requests with (its first generation)."""
    return derive_secret(base64.b64decode(SIGNING_KEY), endpoint_id, 1)


def settings_of(name: str, extra: Mapping[str, str]) -> dict[str, str]:
    """A server's settings: :data:`SERVER_SETTINGS` and ``extra``, its name its ``cluster_name``
    (what its WAL receiver calls itself to the primary while it is a standby)."""
    return {**SERVER_SETTINGS, **extra, "cluster_name": name}


def multi_host(dsns: list[str], **query: str) -> str:
    """One URL naming every server of ``dsns`` (the same user and database), with ``query``."""
    parts = [urlsplit(d) for d in dsns]
    userinfo = parts[0].netloc.rpartition("@")[0]
    hosts = ",".join(p.netloc.rpartition("@")[2] for p in parts)
    netloc = f"{userinfo}@{hosts}" if userinfo else hosts
    return urlunsplit(parts[0]._replace(netloc=netloc, query="&".join(f"{k}={v}" for k, v in query.items())))


def kafka_of(shape: Shape, root: Path) -> tuple[Kafka, dict[str, Link]]:
    """The Kafka node(s) of ``shape`` and the services' link to each (not started): each node
    has its own listener for the services, advertised as the link in front of it, so only
    they go through it."""
    if shape.brokers == 1:
        port = free_port()
        links = {"kafka": Link(f"127.0.0.1:{port}")}
        listeners = {"SERVICES": (port, links["kafka"].address)}
        return ApacheKafka(root / "kafka", settings=TEST_KAFKA_SETTINGS, listeners=listeners), links
    ports = [free_port() for _ in range(shape.brokers)]
    links = {f"kafka{n}": Link(f"127.0.0.1:{port}") for n, port in enumerate(ports, start=1)}
    each = [{"SERVICES": (port, links[f"kafka{n}"].address)} for n, port in enumerate(ports, start=1)]
    return ApacheKafkaCluster(root / "kafka", settings=TEST_KAFKA_SETTINGS, listeners=each), links


@contextlib.asynccontextmanager
async def cluster(
    prefix: str = "chaos", server_settings: Mapping[str, str] | None = None, shape: Shape = SINGLE
) -> AsyncIterator[Cluster]:
    """Everything started, locales and a token projected, a key with room to spare; all stopped
    after. ``server_settings``: PostgreSQL settings of both servers on top of :data:`SERVER_SETTINGS`."""
    server_settings = dict(server_settings or {})
    root = Path(tempfile.mkdtemp(prefix="tickerwire-chaos-"))
    kafka, links = kafka_of(shape, root)
    # Ports of their own from the start: a restarted or rebuilt server is found at the same
    # address; the logs outside the data directories, which a rebuild wipes.
    first, second = SERVERS
    primary = EmbeddedPostgres(
        root / first, port=free_port(), log_path=root / f"{first}.log", settings=settings_of(first, server_settings)
    )
    servers: dict[str, EmbeddedPostgres] = {first: primary}
    stack: ServiceStack | None = None
    try:
        await asyncio.to_thread(kafka.start)
        await asyncio.to_thread(primary.start)
        servers[second] = EmbeddedReplica(
            primary.dsn,
            root / second,
            port=free_port(),
            log_path=root / f"{second}.log",
            settings=settings_of(second, server_settings),
        )
        await asyncio.to_thread(servers[second].start)
        await database_on(servers[second].dsn)
        for name, server in servers.items():
            links[name] = Link(urlsplit(server.dsn).netloc.rpartition("@")[2])
        for link in links.values():
            link.start()
        env = {"TICKERWIRE_STREAM_PING_INTERVAL_S": "1", "TICKERWIRE_DB_POOL_MAX": "10", **WEBHOOKS_ENV}
        if shape.brokers > 1:
            env["TICKERWIRE_TOPIC_REPLICATION_FACTOR"] = str(shape.brokers)
        # The harness's own statements follow the primary as the services do, but directly.
        database_url = multi_host([s.dsn for s in servers.values()], target_session_attrs="read-write")
        stack = ServiceStack(database_url, kafka.bootstrap_servers, prefix, extra_env=env, log_dir=root / "logs")
        stack.log_dir.mkdir()
        await stack.prepare()
        await stack.publish(
            [locale_ev(code, default=code == "en-US") for code in LOCALES] + [token_ev(t) for t in TICKERS]
        )
        through_links = [through(s.dsn, links[name]) for name, s in servers.items()]
        service_env = {
            "TICKERWIRE_DATABASE_URL": multi_host(through_links, target_session_attrs="read-write"),
            "TICKERWIRE_DATABASE_READ_URLS": ",".join(through_links),
            "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": ",".join(
                link.address for name, link in links.items() if name.startswith("kafka")
            ),
        }
        found = Cluster(
            root, kafka, servers, first, stack, links, service_env, server_settings=server_settings, shape=shape
        )
        for role in found.roles:
            found.spawn(role)
        for role in found.roles:
            await found.ready(role)
        found.workspace_id = f"ws_{prefix}"
        found.key = await stack.provision(
            found.workspace_id, rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000, stream_connection_limit=50
        )
        if shape is not SINGLE:
            found.limited_keys[CAPPED_WORKSPACE] = await stack.provision(
                CAPPED_WORKSPACE,
                rate_limit_per_minute=1_000_000,
                daily_quota=1_000_000_000,
                stream_connection_limit=CAPPED_LIMIT,
            )
            found.limited_keys[RATED_WORKSPACE] = await stack.provision(
                RATED_WORKSPACE, rate_limit_per_minute=RATED_LIMIT, daily_quota=1_000_000_000
            )
        yield found
    finally:
        if stack is not None:
            stack.stop_all()
        for link in links.values():
            link.stop()
        for server in [*servers.values(), kafka]:
            await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)


def through(dsn: str, link: Link) -> str:
    """``dsn`` with its host and port replaced by the link's."""
    parts = urlsplit(dsn)
    userinfo = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{link.address}" if userinfo else link.address))
