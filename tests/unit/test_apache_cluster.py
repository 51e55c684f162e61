"""The three-node Apache Kafka cluster's configuration, and its DescribeQuorum request, without Java."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster, describe_quorum_leader
from tickerwire.devstack.embedded.errors import EmbeddedError


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_each_node_has_its_own_id_ports_and_folder_and_the_same_quorum(tmp_path):
    cluster = ApacheKafkaCluster(tmp_path, ports=[19192, 19193, 19194])
    written = []
    for node in cluster.nodes:
        node.data_dir.mkdir(parents=True)
        written.append(properties(node.write_properties().read_text()))
    assert [w["node.id"] for w in written] == ["1", "2", "3"]
    assert len({w["controller.quorum.voters"] for w in written}) == 1
    voters = written[0]["controller.quorum.voters"].split(",")
    assert [v.split("@")[0] for v in voters] == ["1", "2", "3"]
    assert len({w["listeners"] for w in written} | {w["log.dirs"] for w in written}) == 6
    for w, voter in zip(written, voters):
        assert f"CONTROLLER://{voter.split('@')[1]}" in w["listeners"]  # each node is the voter it names
        assert w["offsets.topic.replication.factor"] == "3" and w["transaction.state.log.min.isr"] == "2"
    assert cluster.bootstrap_servers == "127.0.0.1:19192,127.0.0.1:19193,127.0.0.1:19194"


def answer(body: bytes, correlation_id: int = 0x7471) -> bytes:
    payload = struct.pack(">ib", correlation_id, 0) + body
    return struct.pack(">i", len(payload)) + payload


def quorum_body(leader: int, error: int = 0, partition_error: int = 0) -> bytes:
    topic = b"__cluster_metadata"
    return (
        struct.pack(">h", error)
        + bytes([2, len(topic) + 1])
        + topic
        + bytes([2])
        + struct.pack(">ihii", 0, partition_error, leader, 7)
    )


def serve_once(reply: bytes) -> tuple[int, list[bytes]]:
    """A one-shot server answering ``reply``; the port and (once answered) the request it got."""
    listener = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def run() -> None:
        with listener, listener.accept()[0] as conn:
            size = struct.unpack(">i", conn.recv(4))[0]
            got.append(conn.recv(size))
            conn.sendall(reply)

    threading.Thread(target=run, daemon=True).start()
    return listener.getsockname()[1], got


def test_the_quorum_leader_is_read_from_a_describe_quorum_answer():
    port, got = serve_once(answer(quorum_body(leader=2)))
    assert describe_quorum_leader("127.0.0.1", port) == 2
    api_key, version = struct.unpack(">hh", got[0][:4])
    assert (api_key, version) == (55, 0) and b"__cluster_metadata" in got[0]


@pytest.mark.parametrize(
    "reply",
    [answer(quorum_body(2, error=15)), answer(quorum_body(2, partition_error=6)), answer(quorum_body(2), 1)],
    ids=["error", "partition error", "another correlation id"],
)
def test_an_error_or_a_foreign_answer_is_not_taken_for_a_leader(reply):
    port, _ = serve_once(reply)
    with pytest.raises(EmbeddedError):
        describe_quorum_leader("127.0.0.1", port)
