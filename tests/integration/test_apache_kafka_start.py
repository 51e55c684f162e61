"""Apache Kafka's start-up, as the tests and `up --broker apache` use it (skips without Java)."""

from __future__ import annotations

import socket
import time

import pytest

from tickerwire.devstack.embedded import apache_kafka
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.errors import EmbeddedError


def test_a_port_taken_between_the_check_and_the_bind_fails_the_start_at_once(tmp_path, monkeypatch):
    """Kafka logs its fatal start-up error, then lingers about a minute before it exits: the
    start says why as soon as the line is there."""
    broker = ApacheKafka(tmp_path)
    broker.start()
    port = broker.port
    broker.kill()
    monkeypatch.setattr(apache_kafka, "pick_port", lambda port, what: port)  # the race: free when checked
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        started = time.monotonic()
        with pytest.raises(EmbeddedError, match="Apache Kafka could not start: .*Fatal error during broker startup"):
            broker.start()
    assert time.monotonic() - started < 40
    assert not broker.running()
