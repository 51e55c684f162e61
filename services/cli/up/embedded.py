"""The embedded servers ``tickerwire up`` starts when no database or broker is configured:
PostgreSQL (and its replicas with ``--replicas``) and an Apache Kafka of its own (:mod:`.broker`)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .broker import PREFERRED_PORT, OwnBroker, check_state, choose_broker, start_over
from .children import Stack
from .output import UpError, one_line, say
from .timings import Timings

if TYPE_CHECKING:  # imported lazily, by `up` only
    from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
    from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
    from tickerwire.devstack.embedded.phoenix import Phoenix
    from tickerwire.devstack.embedded.postgres import EmbeddedPostgres, EmbeddedReplica


def port_free_or_other(preferred: int) -> int:
    """``preferred`` when it is free, else a port the kernel picks."""
    from tickerwire.devstack.embedded.ports import free_port, port_is_free

    return preferred if port_is_free(preferred) else free_port()


@dataclass
class Embedded:
    """The embedded servers ``up`` started (None where a configured one is used)."""

    postgres: EmbeddedPostgres | None = None
    broker: ApacheKafka | ApacheKafkaCluster | None = None
    #: Which broker of its own ``up`` started (None: a configured one).
    own: OwnBroker | None = None
    #: Streaming replicas of the embedded PostgreSQL (``--replicas N``), the API reading from them.
    replicas: list[EmbeddedReplica] = field(default_factory=list)
    #: The trace viewer of ``--traces`` (:mod:`.traces`), None without it.
    viewer: Phoenix | None = None

    @property
    def kafka_nodes(self) -> list[ApacheKafka]:
        """The nodes of up's own Apache Kafka (one, or three with ``--brokers 3``), none for a configured one."""
        return list(self.broker.nodes) if self.broker is not None else []


def start_embedded(stack: Stack, args, timings: Timings) -> tuple[str, str, Embedded]:
    from tickerwire.devstack.embedded.postgres import (
        DURABLE_SETTINGS,
        PRIMARY_REPLICATION_SETTINGS,
        EmbeddedPostgres,
        EmbeddedReplica,
    )

    dsn = args.database_url
    replicas = args.replicas
    if dsn and replicas:
        raise UpError(
            "--replicas starts replicas of the embedded PostgreSQL; a configured database's replicas are "
            "configured with TICKERWIRE_DATABASE_READ_URLS"
        )
    bootstrap = args.kafka_bootstrap_servers
    if dsn and not bootstrap:
        # Its stored positions are places in one log: an Apache Kafka of up's own, in the state
        # directory, is as easily deleted or started anew without the database knowing.
        raise UpError(
            "a configured database needs a configured broker too (--kafka or TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS): "
            "up's own broker keeps its log in the state directory, which the database would not follow"
        )
    if args.fresh:
        removed = start_over(stack.state_dir)
        say(f"--fresh: removed {', '.join(removed) if removed else 'nothing (no earlier state)'} in {stack.state_dir}")
    try:
        own = choose_broker(bootstrap, stack.state_dir, args.brokers)
        database_kept = check_state(stack.state_dir, own) if not dsn else False
    except ValueError as exc:
        raise UpError(str(exc)) from None
    parts = Embedded(own=own)
    if own is not None:
        from tickerwire.devstack.embedded import kafka_jars
        from tickerwire.devstack.embedded.errors import EmbeddedError

        with timings.step("jars"):
            try:
                kafka_jars.classpath()  # checked, and fetched once: a refusal says what is missing
            except EmbeddedError as exc:
                raise UpError(one_line(exc)) from None
        with timings.step("kafka"):
            broker, bootstrap = start_server(own.make, PREFERRED_PORT)
        stack.embedded.append(broker)
        parts.broker = broker
    if not dsn:
        data = stack.state_dir / "pgdata"
        if not database_kept:
            if own is None and data.exists():
                say(f"a configured broker: the embedded database in {data} is created anew for its log")
            shutil.rmtree(data, ignore_errors=True)
        # Durable: its data is kept from one start to the next, as the Kafka log is.
        settings = {**DURABLE_SETTINGS, **(PRIMARY_REPLICATION_SETTINGS if replicas else {})}
        with timings.step("postgres"):
            pg, dsn = start_server(
                lambda port: EmbeddedPostgres(
                    data, port=port, log_path=stack.state_dir / "postgres.log", settings=settings
                ),
                5433,
            )
        stack.embedded.append(pg)
        parts.postgres = pg
        for n in range(1, replicas + 1):
            shutil.rmtree(stack.state_dir / f"pgreplica{n}", ignore_errors=True)
            replica = EmbeddedReplica(
                dsn,
                stack.state_dir / f"pgreplica{n}",
                port=port_free_or_other(5433 + n),
                log_path=stack.state_dir / f"postgres-replica{n}.log",
                settings=settings,  # durable too: `tickerwire failover` makes one the primary
            )
            with timings.step("postgres"):
                replica.start()
            stack.embedded.append(replica)
            parts.replicas.append(replica)
    return dsn, bootstrap, parts


def start_server(make, preferred: int):
    """An embedded server started on ``preferred`` if free; if that fails (another process,
    another ``up`` perhaps, took the port between the check and the server's bind), once more
    on a port the kernel picks. The server binds its port itself and is checked to hold it."""
    from tickerwire.devstack.embedded.errors import EmbeddedError
    from tickerwire.devstack.embedded.ports import free_port

    port = port_free_or_other(preferred)
    server = make(port)
    try:
        return server, server.start()
    except EmbeddedError as exc:
        if port != preferred:
            raise UpError(one_line(exc)) from None
        say(f"{server.label} could not start on port {port} ({one_line(exc)}); trying another port")
    server = make(free_port())
    try:
        return server, server.start()
    except EmbeddedError as exc:
        raise UpError(one_line(exc)) from None
