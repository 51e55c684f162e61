"""A local trace viewer: Arize Phoenix 20.26.1 (``phoenix serve``, from its own environment,
:mod:`.phoenix_install`) run as a child process, with a web UI and its traces in SQLite.

It serves its UI, its REST API (``/v1``) and its OTLP/HTTP receiver (``/v1/traces``) on
``127.0.0.1:<port>``, so ``OTEL_EXPORTER_OTLP_ENDPOINT`` names that same address; its OTLP/gRPC
receiver is on another loopback port. Phoenix binds its gRPC receiver to every address (``[::]``)
whatever its host: :data:`LAUNCHER` runs ``phoenix serve`` with that bind moved to its host, so
nothing listens beyond loopback. Its own telemetry is off (no web analytics, no request to the
internet of its own, no LLM assistant) and it is given no ``OTEL_`` or ``PHOENIX_`` variable of
ours: :func:`server_env` is its whole configuration.

Its data (``phoenix.db``, SQLite) is in ``data_dir``: the traces are there at the next start, as
the rest of up's state is. A restart keeps its ports, so the senders find it again.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping

from .child import DataDirServer
from .errors import EmbeddedError
from .phoenix_install import VERSION, ensure_installed, python
from .ports import LOCALHOST, accepts_connections, ensure_running, free_port, listens_on, pick_port, spawn

log = logging.getLogger(__name__)

#: Phoenix's usual port for its UI and OTLP/HTTP; another one when it is taken.
DEFAULT_PORT = 6006
#: A first start creates its database (migrations): tens of seconds on a busy machine.
START_TIMEOUT_S = 180.0
#: Starts on ports that were free when checked but taken at Phoenix's bind, before giving up.
BIND_ATTEMPTS = 3
DATABASE = "phoenix.db"

#: ``phoenix serve`` (``python -c LAUNCHER serve``) with its gRPC receiver bound to
#: ``$PHOENIX_HOST`` instead of every address (its ``[::]:<port>``).
LAUNCHER = """\
import os, sys
from grpc.aio import _server
_add = _server.Server.add_insecure_port
def _on_host(self, address):
    return _add(self, address.replace("[::]:", os.environ["PHOENIX_HOST"] + ":", 1))
_server.Server.add_insecure_port = _on_host
from phoenix.server.main import main
sys.argv[0] = "phoenix"
sys.exit(main())
"""


def server_env(base: Mapping[str, str], *, folder: Path, port: int, grpc_port: int) -> dict[str, str]:
    """Phoenix's environment: ``base`` without any ``OTEL_`` or ``PHOENIX_`` variable (those are
    meant for Tickerwire's processes, or would reconfigure it), then its settings: loopback, the
    ports given, its SQLite database in ``folder``, nothing sent anywhere of its own."""
    env = {key: value for key, value in base.items() if not key.startswith(("OTEL_", "PHOENIX_"))}
    env.update(
        {
            "PHOENIX_HOST": LOCALHOST,
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_WORKING_DIR": str(folder),
            "PHOENIX_SQL_DATABASE_URL": f"sqlite:///{folder / DATABASE}",
            # No web analytics (FullStory, Scarf) and no request of its own to the internet.
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            # An LLM chat of its own: nothing a trace viewer needs.
            "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            # Without it every migration's SQL statement goes to its log.
            "PHOENIX_LOG_MIGRATIONS": "false",
        }
    )
    return env


class Phoenix(DataDirServer):
    """Phoenix on loopback: ``start()`` returns its URL once it answers and holds both its ports;
    ``stop()`` (SIGINT, SIGKILL after 10 s) is idempotent. Its database is in ``data_dir``, its log
    there too unless ``log_path`` names another file."""

    label = "Phoenix"
    log_name = "phoenix.log"

    def __init__(
        self, data_dir: Path, port: int | None = None, log_path: Path | None = None, *, install: Path | None = None
    ) -> None:
        """``install``: the folder of its environment (default: :func:`.phoenix_install.ensure_installed`,
        which installs it once)."""
        super().__init__(data_dir, port, log_path)
        self._grpc_port: int | None = None
        self._install = install
        self._served = False

    @property
    def database(self) -> Path:
        return self._data_dir / DATABASE

    @property
    def url(self) -> str:
        """Its UI at ``/``, its REST API under ``/v1``."""
        if self._port is None:
            raise EmbeddedError("Phoenix has no port yet; call start() first")
        return f"http://{LOCALHOST}:{self._port}"

    @property
    def otlp_endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` names (the exporter adds ``/v1/traces``): its URL."""
        return self.url

    @property
    def grpc_port(self) -> int | None:
        return self._grpc_port

    def start(self) -> str:
        if self.running():
            return self.url
        started = time.monotonic()
        install = self._install or ensure_installed()
        self._data_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, BIND_ATTEMPTS + 1):
            self._choose_ports(fresh=attempt > 1)
            try:
                self._boot(lambda: self._launch(install), "Phoenix output")
                break
            except EmbeddedError:
                if attempt == BIND_ATTEMPTS or not self._may_move() or not self._bind_failed():
                    raise
                log.warning(
                    "Phoenix's ports were taken at its bind (attempt %d of %d); other ports", attempt, BIND_ATTEMPTS
                )
        self._served = True
        log.info("Phoenix %s ready on %s (pid %d) in %.1fs", VERSION, self.url, self.pid, time.monotonic() - started)
        return self.url

    def _may_move(self) -> bool:
        """Whether other ports may be taken: none was asked for, and none was ever served on."""
        return self._requested_port is None and not self._served

    def _choose_ports(self, *, fresh: bool) -> None:
        """The ports it had (a restart keeps them: the senders know them), else free ones."""
        if fresh:
            self._port = self._grpc_port = None
        self._port = pick_port(self._port, "Phoenix's UI and OTLP/HTTP receiver")
        while self._grpc_port is None or self._grpc_port == self._port:
            self._grpc_port = free_port()

    def _launch(self, install: Path) -> None:
        assert self._port is not None and self._grpc_port is not None
        log_file = self._open_log()
        env = server_env(os.environ, folder=self._data_dir, port=self._port, grpc_port=self._grpc_port)
        log.info("starting Phoenix on %s (gRPC %d), log %s", self.url, self._grpc_port, self.log_path)
        try:
            self._process = spawn(
                [str(python(install)), "-c", LAUNCHER, "serve"], log_file=log_file, env=env, cwd=self._data_dir
            )
        except OSError as exc:
            self.stop()
            raise EmbeddedError(f"cannot run {python(install)}: {exc}") from exc

    def _wait_ready(self) -> None:
        """Until ``/healthz`` answers and both its ports are this child's."""
        assert self._process is not None and self._port is not None and self._grpc_port is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self._answers() and self._holds(self._port) and self._holds(self._grpc_port)):
            ensure_running(self._process, "Phoenix")
            if time.monotonic() >= deadline:
                raise EmbeddedError(f"Phoenix did not answer on {self.url}/healthz within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.2)

    def _holds(self, port: int) -> bool:
        assert self._process is not None
        held = listens_on(self._process.pid, port)
        return held if held is not None else accepts_connections(LOCALHOST, port)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2.0) as answer:
                return answer.status == 200
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def _bind_failed(self) -> bool:
        return b"address already in use" in self._this_start().lower()
