"""The broker ``tickerwire up`` starts itself: Apache Kafka, one node or three (``--brokers``),
its log kept in the state directory from one start to the next.

A kept log keeps the rest with it: the embedded database (its stored positions are places in
that log), the demo key and dataset (published only into a log that lacks them; the key is
kept beside the log, which holds only its hash), and a broker that died is restarted on its
log with nothing to re-sync. What a state directory holds is checked before anything starts
(:func:`check_state`): a database that follows another log, or no log at all, is refused in
one line, never silently wiped; ``--fresh`` starts over.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:  # imported lazily, by `up` only
    from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
    from tickerwire.devstack.embedded.apache_kafka import ApacheKafka

#: The one broker `up` starts (what `--broker` still accepts).
APACHE = "apache"
#: The port up's broker prefers (a free one when it is taken).
PREFERRED_PORT = 19092
#: The demo key of a new log; a log that may hold it already gets a fresh key id (an event
#: for a key id the log has is older than what the read model stored, and would be ignored).
DEMO_KEY_ID = "key_demo"
#: The layout of the state directory this version writes, in ``state_dir/layout``; a directory
#: of a newer layout is refused. 1 (no file): the versions whose default broker kept its log in
#: memory. 2: Apache Kafka's log, and the database beside it, kept.
LAYOUT = 2
LAYOUT_FILE = "layout"
#: Names the log the embedded database was projected from (``kafka`` or ``kafka3``).
FOLLOWS_FILE = "pgdata.follows-kafka"
#: What ``--fresh`` removes (the logs of earlier runs stay).
STATE = ("pgdata", "kafka", "kafka3", FOLLOWS_FILE, "webhooks-signing-key", LAYOUT_FILE, "phoenix")


@dataclass(frozen=True)
class DemoState:
    """What ``up`` published into a kept log: the demo key (the log holds only its hash) and
    whether the demo dataset went out too."""

    api_key: str
    key_id: str
    dataset: bool


@dataclass(frozen=True)
class OwnBroker:
    """The Apache Kafka ``up`` starts, and whether it comes back with the log of an earlier start."""

    state_dir: Path
    #: This start found the log of an earlier one (so the read model is kept with it).
    found_log: bool
    #: Apache Kafka nodes (``--brokers``): 1, or 3 in one KRaft quorum.
    nodes: int = 1

    @property
    def kind(self) -> str:
        return APACHE

    @property
    def label(self) -> str:
        return "Apache Kafka" if self.nodes == 1 else f"Apache Kafka ({self.nodes} nodes)"

    @property
    def data_dir(self) -> Path:
        """The kept log: ``kafka`` for one node, ``kafka3`` (``node1`` to ``node3``) for three,
        so that changing ``--brokers`` starts on another log rather than a mismatched one."""
        return self.state_dir / ("kafka" if self.nodes == 1 else f"kafka{self.nodes}")

    def make(self, port: int) -> ApacheKafka | ApacheKafkaCluster:
        """The server, not started, on ``port`` (its output in ``state_dir/broker.log``; a
        cluster's nodes on ``port`` and the two after it when free, each logging into
        ``state_dir/kafka-nodeN.log``)."""
        if self.nodes > 1:
            from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
            from tickerwire.devstack.embedded.ports import free_ports, port_is_free

            ports = [port + n for n in range(self.nodes)]
            if not all(port_is_free(p) for p in ports):
                ports = free_ports(self.nodes)
            return ApacheKafkaCluster(self.data_dir, ports=ports, log_dir=self.state_dir)
        from tickerwire.devstack.embedded.apache_kafka import ApacheKafka

        return ApacheKafka(self.data_dir, port=port, log_path=self.state_dir / "broker.log")

    @property
    def _demo_file(self) -> Path:
        return self.data_dir / "demo.json"

    def saved_demo(self) -> DemoState | None:
        """The demo this log was given at an earlier start (None: not known to be in it)."""
        if not self.found_log:
            return None
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            saved = orjson.loads(self._demo_file.read_bytes())
            return DemoState(str(saved["api_key"]), str(saved["key_id"]), bool(saved["dataset"]))
        return None

    def save_demo(self, state: DemoState) -> None:
        """Remember the published demo beside the log (readable by this user only: it holds the key)."""
        tmp = self._demo_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(orjson.dumps({"api_key": state.api_key, "key_id": state.key_id, "dataset": state.dataset}))
        tmp.replace(self._demo_file)


def start_over(state_dir: Path) -> list[str]:
    """``--fresh``: remove the data of earlier starts (database, logs of Kafka, demo key,
    signing key, the trace viewer's traces); the names removed."""
    removed = []
    for name in (*STATE, *(p.name for p in state_dir.glob("pgreplica*"))):
        path = state_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        removed.append(name)
    return removed


def check_state(state_dir: Path, own: OwnBroker | None) -> bool:
    """Whether this start keeps the embedded database, after checking that the state directory
    is one this version can use; raises ValueError in one line where it is not (a newer layout;
    a database projected from a log that is not here). Marks the directory as this layout, and
    the database as following this start's log. A configured broker: the embedded database is
    created anew (``up`` cannot tell whether that log is the one it was projected from)."""
    layout_file = state_dir / LAYOUT_FILE
    found = LAYOUT
    with contextlib.suppress(OSError, ValueError, IndexError):
        found = int(layout_file.read_text().split()[-1])
    if found > LAYOUT:
        raise ValueError(
            f"the state directory {state_dir} was written by a newer tickerwire (layout {found}, this one "
            f"reads {LAYOUT}): run that version, or pass --fresh to start over there"
        )
    marker = state_dir / FOLLOWS_FILE
    followed = (marker.read_text().strip() or "kafka") if marker.exists() else None
    has_database = (state_dir / "pgdata" / "PG_VERSION").exists()
    if own is None:
        marker.unlink(missing_ok=True)
        return False
    if has_database and not (own.found_log and followed == own.data_dir.name):
        raise ValueError(_mismatch(state_dir, own, followed))
    layout_file.write_text(f"tickerwire up state, layout {LAYOUT}\n")
    marker.write_text(own.data_dir.name + "\n")
    return has_database


def _mismatch(state_dir: Path, own: OwnBroker, followed: str | None) -> str:
    if followed is None:
        why = "was projected from a log that is gone (an earlier version's broker kept it in memory)"
    elif followed != own.data_dir.name:
        other = "one node (kafka/)" if followed == "kafka" else f"{followed[5:]} nodes ({followed}/)"
        why = f"follows the log of {other}, and this start asks for --brokers {own.nodes}"
    else:
        why = f"follows the Kafka log in {own.data_dir}, which is gone"
    return (
        f"the database in {state_dir / 'pgdata'} {why}: pass --fresh to start over there (its data is then "
        "removed), or another --state-dir"
    )


def demo_key_id(broker: OwnBroker | None) -> str:
    """The id of a new demo key: ``key_demo`` in a new log, a fresh one where the log may hold
    ``key_demo`` already (a kept or a configured log)."""
    if broker is not None and not broker.found_log:
        return DEMO_KEY_ID
    return f"{DEMO_KEY_ID}_{secrets.token_hex(4)}"


def choose_broker(configured: str | None, state_dir: Path, nodes: int = 1) -> OwnBroker | None:
    """The Apache Kafka ``up`` starts, of ``nodes`` nodes (``--brokers``); None: it uses the
    configured one. Raises ValueError, in one line, for ``--brokers`` with a configured broker."""
    if configured:
        if nodes != 1:
            raise ValueError(
                f"--brokers {nodes} starts a cluster of Apache Kafka nodes of up's own: it needs no configured "
                "broker (--kafka or TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS)"
            )
        return None
    from tickerwire.devstack.embedded import apache_kafka
    from tickerwire.devstack.embedded.apache_cluster import has_cluster_log

    data_dir = OwnBroker(state_dir, False, nodes).data_dir
    found = apache_kafka.has_log(data_dir) if nodes == 1 else has_cluster_log(data_dir)
    broker = OwnBroker(state_dir, found_log=found, nodes=nodes)
    if not broker.found_log:
        broker._demo_file.unlink(missing_ok=True)  # it named a key of a log that is gone
    return broker
