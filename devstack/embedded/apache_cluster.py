"""A KRaft cluster of Apache Kafka nodes on this machine, each a broker and a controller in one
JVM (:class:`.apache_kafka.ApacheKafka`), for what one node cannot show: replication, a
partition leader or the active controller dying while the others go on.

Every node has its own client port, controller port and folder (``data_dir/nodeN``), the same
``controller.quorum.voters`` naming the three controllers, and the same cluster id formatted
into its log. Internal topics are replicated on every node with ``min.insync.replicas=2``, as
the declared topics are (services/common/kafka/declaration.py). A node's log and its ports
are kept across a restart, so a node killed and started again rejoins as itself.
"""

from __future__ import annotations

import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .apache_kafka import ApacheKafka, has_log
from .errors import EmbeddedError
from .ports import LOCALHOST, free_ports, port_is_free

#: Each node's heap: three JVMs share a developer's machine.
CLUSTER_HEAP = "-Xmx256m"
SIZE = 3

#: The settings every node of the cluster adds to a lone node's: internal topics on every node,
#: and a write to them acknowledged by two.
CLUSTER_SETTINGS = {
    "offsets.topic.replication.factor": str(SIZE),
    "transaction.state.log.replication.factor": str(SIZE),
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": str(SIZE),
    "share.coordinator.state.topic.min.isr": "2",
    "default.replication.factor": str(SIZE),
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
}


def has_cluster_log(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds the formatted logs of a cluster (of an earlier start)."""
    return all(has_log(Path(data_dir) / f"node{n}") for n in range(1, SIZE + 1))


class ApacheKafkaCluster:
    """Three Apache Kafka nodes (ids 1 to 3) on ``127.0.0.1``, their logs in ``data_dir/nodeN``.

    ``start()`` starts every node that is not running, together (a quorum needs two of them
    before any says it started), and returns the bootstrap address naming all three;
    ``stop()`` stops them all. ``node(id).kill()`` and ``node(id).start()`` are one node's
    crash and restart, on the same ports and log.
    """

    label = "Apache Kafka cluster"

    def __init__(
        self,
        data_dir: Path,
        ports: list[int] | None = None,
        log_dir: Path | None = None,
        settings: dict | None = None,
        heap: str = CLUSTER_HEAP,
        listeners: list[dict[str, tuple[int, str]]] | None = None,
    ) -> None:
        """``listeners``: each node's more listeners (:class:`.apache_kafka.ApacheKafka`), one
        mapping per node in id order (a proxy in front of each node, say)."""
        if listeners is not None and len(listeners) != SIZE:
            raise EmbeddedError(f"a cluster of {SIZE} nodes needs {SIZE} listener mappings, not {len(listeners)}")
        self._data_dir = Path(data_dir).absolute()
        if ports is not None and len(ports) != SIZE:
            raise EmbeddedError(f"a cluster of {SIZE} nodes needs {SIZE} client ports, not {ports}")
        spare = free_ports(2 * SIZE)
        client = list(ports) if ports is not None else spare[:SIZE]
        controllers = [p for p in spare if p not in client][:SIZE]
        if len(controllers) < SIZE:
            controllers += free_ports(SIZE)[: SIZE - len(controllers)]
        voters = ",".join(f"{n}@{LOCALHOST}:{port}" for n, port in enumerate(controllers, start=1))
        self.nodes = [
            ApacheKafka(
                self._data_dir / f"node{n}",
                port=client[n - 1],
                log_path=(Path(log_dir) / f"kafka-node{n}.log") if log_dir else None,
                settings={**CLUSTER_SETTINGS, **(settings or {})},
                listeners=listeners[n - 1] if listeners else None,
                node_id=n,
                controller_port=controllers[n - 1],
                voters=voters,
                heap=heap,
            )
            for n in range(1, SIZE + 1)
        ]
        self.started_in: float | None = None

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{LOCALHOST}:{node.port}" for node in self.nodes)

    @property
    def port(self) -> int | None:
        """The first node's client port (the others are in :attr:`bootstrap_servers`)."""
        return self.nodes[0].port

    @property
    def pid(self) -> int | None:
        return self.nodes[0].pid

    def node(self, node_id: int) -> ApacheKafka:
        return self.nodes[node_id - 1]

    def running(self) -> bool:
        return all(node.running() for node in self.nodes)

    def start(self) -> str:
        """Start every node not running, in parallel; the bootstrap address once each started."""
        down = [node for node in self.nodes if not node.running()]
        taken = [node.port for node in down if node.port is not None and not port_is_free(node.port)]
        if taken:
            raise EmbeddedError(f"cannot start the {self.label}: port(s) {taken} already in use")
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=SIZE) as pool:
            futures = [pool.submit(node.start) for node in down]
            errors = [exc for future in futures if (exc := future.exception()) is not None]
        if errors:
            self.stop()
            raise EmbeddedError(f"the {self.label} did not start: {errors[0]}")
        self.started_in = time.monotonic() - started
        return self.bootstrap_servers

    def stop(self) -> None:
        """Stop every node (a controlled shutdown each, in parallel: one by one, the last ones
        would wait for a quorum that is gone). Safe to call twice."""
        with ThreadPoolExecutor(max_workers=SIZE) as pool:
            list(pool.map(lambda node: node.stop(), self.nodes))

    def active_controller(self, timeout: float = 5.0) -> int:
        """The id of the active controller (the leader of the metadata quorum), asked of the
        running nodes with a DescribeQuorum request, as ``kafka-metadata-quorum`` does."""
        last: Exception | None = None
        for node in self.nodes:
            if not node.running() or node.port is None:
                continue
            try:
                leader = describe_quorum_leader(LOCALHOST, node.port, timeout)
            except (OSError, EmbeddedError) as exc:
                last = exc
                continue
            if leader >= 0:
                return leader
        raise EmbeddedError(f"no node of the {self.label} named an active controller: {last}")

    def __enter__(self) -> ApacheKafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_DESCRIBE_QUORUM = 55
_METADATA_TOPIC = b"__cluster_metadata"


def describe_quorum_leader(host: str, port: int, timeout: float = 5.0) -> int:
    """The leader id of the metadata quorum that ``host:port`` reports (DescribeQuorum v0, a
    flexible request: header v2, compact arrays and strings); -1 when it knows none."""
    correlation_id = 0x7471
    client_id = b"tickerwire-quorum"
    header = struct.pack(">hhih", _DESCRIBE_QUORUM, 0, correlation_id, len(client_id)) + client_id + b"\x00"
    # topics: one topic (__cluster_metadata) with one partition (0); each level ends with no tags.
    body = bytes([2, len(_METADATA_TOPIC) + 1]) + _METADATA_TOPIC + bytes([2]) + struct.pack(">i", 0) + b"\x00\x00\x00"
    request = header + body
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", _exactly(sock, 4))[0]
        answer = _exactly(sock, size)
    got_id, tags, error = struct.unpack(">ibh", answer[:7])
    if got_id != correlation_id or tags != 0:
        raise EmbeddedError(f"{host}:{port} answered DescribeQuorum with an unexpected header")
    if error:
        raise EmbeddedError(f"{host}:{port} answered DescribeQuorum with error code {error}")
    at = 7
    topics, at = answer[at] - 1, at + 1
    name_len, at = answer[at] - 1, at + 1
    at += name_len
    partitions, at = answer[at] - 1, at + 1
    if topics < 1 or partitions < 1:
        return -1
    _index, part_error, leader = struct.unpack(">ihi", answer[at : at + 10])
    if part_error:
        raise EmbeddedError(f"{host}:{port} answered DescribeQuorum with partition error code {part_error}")
    return leader


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EmbeddedError("the connection closed before the whole answer came")
        data += chunk
    return data
