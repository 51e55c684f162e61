"""The session's broker, watched: a broker that stopped answering is restarted between tests.

A wedged broker would otherwise fail every later test of its xdist worker, each after its own
long timeout. Before each test that uses the broker, it must answer a Kafka request within
``PROBE_S`` (twice, a little apart); if it does not, it is killed and started again on the same
port with its log, and the run says so. A broker that cannot be started again fails the test at once, naming why.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.errors import EmbeddedError
from tickerwire.devstack.embedded.kafka_probe import answers_kafka

PROBE_S = 5.0

#: What an Apache Kafka of the tests' own allows beyond a default one: the test stacks run their
#: consumers with 2 s sessions (tests/support/stack.py), so that a killed member's partitions
#: move on quickly, and Kafka refuses sessions under 6 s by default.
TEST_KAFKA_SETTINGS = {"group.min.session.timeout.ms": "1000"}

Server = TypeVar("Server", ApacheKafka, ApacheKafkaCluster)


def own_kafka(kind: Callable[..., Server], prefix: str, settings: dict[str, str]) -> Iterator[Server]:
    """A Kafka of a test module's own (``kind(folder, settings=settings)``, started), its log
    in a temporary folder removed after: one to kill and restart without touching the
    session's broker. A module fixture yields from it."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with kind(root, settings=settings) as server:
            yield server
    finally:
        shutil.rmtree(root, ignore_errors=True)


class SessionBroker:
    """The broker a test session started (None for one it was given), and its bootstrap address."""

    def __init__(self, bootstrap: str, server: ApacheKafka | None = None) -> None:
        self.bootstrap = bootstrap
        self.server = server
        self.restarts = 0

    def answers(self) -> bool:
        host, _, port = self.bootstrap.split(",")[0].rpartition(":")
        return answers_kafka(host, int(port), timeout=PROBE_S)

    def ensure_answering(self) -> None:
        if self.server is None or self.answers():
            return
        time.sleep(1.0)
        if self.answers():
            return
        self.restarts += 1
        warnings.warn(
            f"the session's {self.server.label} at {self.bootstrap} stopped answering Kafka requests; "
            f"restarting it (restart {self.restarts} of this worker)",
            stacklevel=1,
        )
        try:
            self.server.kill()
            self.server.start()  # the same folder and port
        except EmbeddedError as exc:
            pytest.fail(f"the session broker stopped answering and could not be started again: {exc}")
        if not self.answers():
            pytest.fail(f"the session broker at {self.bootstrap} does not answer even after a restart")
