"""The broker ``tickerwire up`` starts itself (``--broker``): the embedded Tansu, memory only
(the default), or a real Apache Kafka whose log is kept in the state directory.

A kept log changes three things in ``up``: the embedded database is kept with it (its stored
positions are places in that log), the demo key and dataset are published only into a log that
lacks them (the key is kept beside the log, which holds only its hash), and a broker that died
is restarted on its log with nothing to re-sync.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:  # imported lazily, by `up` only
    from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
    from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
    from tickerwire.devstack.embedded.broker import EmbeddedBroker

EMBEDDED = "embedded"
APACHE = "apache"
#: The port up's broker prefers (a free one when it is taken).
PREFERRED_PORT = 19092
#: The demo key of a new log; a log that may hold it already gets a fresh key id (an event
#: for a key id the log has is older than what the read model stored, and would be ignored).
DEMO_KEY_ID = "key_demo"


@dataclass(frozen=True)
class DemoState:
    """What ``up`` published into a kept log: the demo key (the log holds only its hash) and
    whether the demo dataset went out too."""

    api_key: str
    key_id: str
    dataset: bool


@dataclass(frozen=True)
class OwnBroker:
    """The broker ``up`` starts: which kind, and whether it comes back with a log of an earlier start."""

    kind: str
    state_dir: Path
    #: The log survives a stop (Apache Kafka's, in ``state_dir/kafka``).
    keeps_log: bool
    #: This start found the log of an earlier one (so the read model is kept with it).
    found_log: bool
    #: Apache Kafka nodes (``--brokers``): 1, or 3 in one KRaft quorum.
    nodes: int = 1

    @property
    def label(self) -> str:
        if self.kind != APACHE:
            return "broker"
        return "Apache Kafka" if self.nodes == 1 else f"Apache Kafka ({self.nodes} nodes)"

    @property
    def data_dir(self) -> Path:
        """The kept log: ``kafka`` for one node, ``kafka3`` (``node1`` to ``node3``) for three,
        so that changing ``--brokers`` starts on another log rather than a mismatched one."""
        return self.state_dir / ("kafka" if self.nodes == 1 else f"kafka{self.nodes}")

    def make(self, port: int) -> EmbeddedBroker | ApacheKafka | ApacheKafkaCluster:
        """The server, not started, on ``port`` (its output in ``state_dir/broker.log``; a
        cluster's nodes on ``port`` and the two after it when free, each logging into
        ``state_dir/kafka-nodeN.log``)."""
        if self.kind == APACHE and self.nodes > 1:
            from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
            from tickerwire.devstack.embedded.ports import free_ports, port_is_free

            ports = [port + n for n in range(self.nodes)]
            if not all(port_is_free(p) for p in ports):
                ports = free_ports(self.nodes)
            return ApacheKafkaCluster(self.data_dir, ports=ports, log_dir=self.state_dir)
        if self.kind == APACHE:
            from tickerwire.devstack.embedded.apache_kafka import ApacheKafka

            return ApacheKafka(self.data_dir, port=port, log_path=self.state_dir / "broker.log")
        from tickerwire.devstack.embedded.broker import EmbeddedBroker

        return EmbeddedBroker(port=port, log_path=self.state_dir / "broker.log")

    @property
    def _demo_file(self) -> Path:
        return self.data_dir / "demo.json"

    def saved_demo(self) -> DemoState | None:
        """The demo this log was given at an earlier start (None: not known to be in it)."""
        if not (self.keeps_log and self.found_log):
            return None
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            saved = orjson.loads(self._demo_file.read_bytes())
            return DemoState(str(saved["api_key"]), str(saved["key_id"]), bool(saved["dataset"]))
        return None

    def save_demo(self, state: DemoState) -> None:
        """Remember the published demo beside the log (readable by this user only: it holds the key)."""
        if not self.keeps_log:
            return
        tmp = self._demo_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(orjson.dumps({"api_key": state.api_key, "key_id": state.key_id, "dataset": state.dataset}))
        tmp.replace(self._demo_file)


def database_kept(own: OwnBroker | None, state_dir: Path) -> bool:
    """Whether this start keeps the embedded database: only beside a kept log it was last
    projected from (a start on another broker re-created it for that broker's log). Marks the
    database as following this start's broker."""
    marker = state_dir / "pgdata.follows-kafka"
    follows = own is not None and own.keeps_log
    # The marker names the log it follows ("kafka" or "kafka3"; empty: "kafka", as it was written before).
    followed = (marker.read_text().strip() or "kafka") if marker.exists() else None
    kept = follows and own is not None and own.found_log and followed == own.data_dir.name
    if follows and own is not None:
        marker.write_text(own.data_dir.name + "\n")
    else:
        marker.unlink(missing_ok=True)
    return kept


def demo_key_id(broker: OwnBroker | None) -> str:
    """The id of a new demo key: ``key_demo`` in a new log, a fresh one where the log may hold
    ``key_demo`` already (a kept or a configured log)."""
    if broker is not None and not broker.found_log:
        return DEMO_KEY_ID
    return f"{DEMO_KEY_ID}_{secrets.token_hex(4)}"


def choose_broker(kind: str | None, configured: str | None, state_dir: Path, nodes: int = 1) -> OwnBroker | None:
    """The broker ``up`` starts (None: it uses the configured one), of ``nodes`` nodes
    (``--brokers``). Raises ValueError, in one line, for ``--broker`` or ``--brokers`` with a
    configured broker, several nodes of another broker than Apache Kafka, or an Apache Kafka
    that cannot run here."""
    if nodes != 1 and (configured or kind != APACHE):
        raise ValueError(
            f"--brokers {nodes} starts a cluster of Apache Kafka nodes: it needs --broker apache"
            + (" and no configured broker (--kafka or TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS)" if configured else "")
        )
    if configured:
        if kind is not None:
            raise ValueError(
                f"--broker {kind} starts a broker of up's own, and a broker is configured (--kafka or "
                "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS): drop one of them"
            )
        return None
    if kind != APACHE:
        return OwnBroker(EMBEDDED, state_dir, keeps_log=False, found_log=False)
    from tickerwire.devstack.embedded import apache_kafka
    from tickerwire.devstack.embedded.errors import EmbeddedError

    reason = apache_kafka.available()
    if reason is None:
        try:
            apache_kafka.classpath()  # fetched from Maven Central on first use
        except EmbeddedError as exc:
            reason = str(exc)
    if reason is not None:
        raise ValueError(f"--broker apache: {reason.splitlines()[0]}")
    if nodes == 1:
        found = apache_kafka.has_log(state_dir / "kafka")
    else:
        from tickerwire.devstack.embedded.apache_cluster import has_cluster_log

        found = has_cluster_log(state_dir / f"kafka{nodes}")
    broker = OwnBroker(APACHE, state_dir, keeps_log=True, found_log=found, nodes=nodes)
    if not broker.found_log:
        broker._demo_file.unlink(missing_ok=True)  # it named a key of a log that is gone
    return broker
