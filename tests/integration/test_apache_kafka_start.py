"""Apache Kafka's start-up, as the tests and `up --broker apache` use it (skips without Java)."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from tickerwire.devstack.embedded import apache_kafka
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.errors import EmbeddedError


def test_a_port_taken_between_the_check_and_the_bind_fails_the_start_at_once(tmp_path, monkeypatch):
    """Kafka logs its fatal start-up error, then lingers about a minute before it exits: the
    start says why as soon as the line is there (after its few attempts, each as quick)."""
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
    assert time.monotonic() - started < 40 * apache_kafka.BIND_ATTEMPTS
    assert not broker.running()


class ReleaseOnRetry(logging.Handler):
    """Closes ``sock`` when the start says it will try its bind again."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock, self.retries = sock, 0

    def emit(self, record: logging.LogRecord) -> None:
        if "was taken at its bind" in record.getMessage():
            self.retries += 1
            self.sock.close()


def test_a_port_held_for_a_moment_at_the_bind_is_bound_on_the_next_attempt(tmp_path, monkeypatch):
    """A restart on the node's own port, which something held just when the node bound it (the
    session broker's restart once failed so), starts on that port at its next attempt."""
    broker = ApacheKafka(tmp_path)
    broker.start()
    port = broker.port
    broker.kill()
    monkeypatch.setattr(apache_kafka, "pick_port", lambda port, what: port)  # the race: free when checked
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", port))
    taken.listen()
    release = ReleaseOnRetry(taken)
    logger = logging.getLogger(apache_kafka.__name__)
    logger.addHandler(release)
    try:
        assert broker.start() == f"127.0.0.1:{port}"
        assert release.retries == 1 and broker.running()
    finally:
        logger.removeHandler(release)
        taken.close()
        broker.stop()
