"""A local trace viewer: Jaeger v1.75.0 (the ``jaeger`` v2 program, :mod:`.jaeger_build`) run as
a child process, keeping traces in memory only.

It receives OTLP over HTTP on ``127.0.0.1:<otlp_port>`` (what ``OTEL_EXPORTER_OTLP_ENDPOINT``
names) and serves its query API and UI on ``127.0.0.1:<port>``; its query gRPC port is on
loopback too, and nothing listens on any other address. Its own telemetry is off: no metrics
listener, no traces of itself, warnings only in its log. Storage is Jaeger's memory store,
bounded to :data:`MAX_TRACES` traces (the oldest go first): the traces are gone when it stops.

The config is generated at each start (:func:`config`, written as JSON, which is YAML). A
restart keeps its ports, so the processes that send to it find it again.

A binary built from the Go module proxy has no UI assets (Jaeger's releases embed the
``jaeger-ui`` build): its page at ``/`` is a placeholder, and the query API (``/api/traces``,
``/api/services``) is the viewer; :attr:`Jaeger.has_ui` tells which. ``$TICKERWIRE_JAEGER_UI``
names a folder holding a ``jaeger-ui`` build (its index.html and static folder), served in
its place.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .child import ChildServer
from .errors import EmbeddedError
from .jaeger_build import VERSION, ensure_binary
from .ports import LOCALHOST, accepts_connections, ensure_running, free_port, listens_on, pick_port, spawn

log = logging.getLogger(__name__)

UI_ENV = "TICKERWIRE_JAEGER_UI"
#: Traces the memory store keeps; past it the oldest are dropped (a few hundred MB at most).
MAX_TRACES = 20_000
#: The name of the store in the config.
STORE = "memory_store"
START_TIMEOUT_S = 30.0
#: Starts on ports that were free when checked but taken at Jaeger's bind, before giving up.
BIND_ATTEMPTS = 3
#: What Jaeger's placeholder page says when its binary has no UI assets.
PLACEHOLDER = b"not the Jaeger UI"


def config(
    *, otlp_port: int, query_port: int, grpc_port: int, max_traces: int = MAX_TRACES, ui_assets: Path | None = None
) -> dict[str, Any]:
    """The Jaeger v2 configuration of the viewer: an OTLP/HTTP receiver into a bounded memory
    store, the query extension on loopback, no telemetry of its own."""
    if max_traces < 1:
        raise ValueError(f"max_traces must be at least 1, not {max_traces}")
    query: dict[str, Any] = {
        "storage": {"traces": STORE},
        "http": {"endpoint": f"{LOCALHOST}:{query_port}"},
        # Its default is every address (:16685): named, so nothing listens beyond loopback.
        "grpc": {"endpoint": f"{LOCALHOST}:{grpc_port}"},
        # On by default in v2: it would send its own spans to the OTLP default (localhost:4317).
        "enable_tracing": False,
    }
    if ui_assets is not None:
        query["ui"] = {"assets_path": str(ui_assets)}
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            # No metrics listener (its default is :8888), and only warnings in its log.
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_query": query,
            "jaeger_storage": {"backends": {STORE: {"memory": {"max_traces": max_traces}}}},
        },
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"{LOCALHOST}:{otlp_port}"}}}},
        "processors": {"batch": {}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": STORE}},
    }


def config_text(settings: dict[str, Any]) -> str:
    """The config file's text: JSON, which every YAML parser (Jaeger's too) reads as YAML."""
    return json.dumps(settings, indent=2) + "\n"


def ui_assets_from_env() -> Path | None:
    """``$TICKERWIRE_JAEGER_UI``, checked to hold a UI build (its index.html), or None."""
    if not (named := os.environ.get(UI_ENV)):
        return None
    folder = Path(named).expanduser().absolute()
    if not (folder / "index.html").is_file():
        raise EmbeddedError(f"{UI_ENV}={named} holds no index.html (a jaeger-ui build folder)")
    return folder


class Jaeger(ChildServer):
    """Jaeger on loopback: ``start()`` returns the viewer's URL once its query API answers and
    its OTLP port is its own; ``stop()`` (SIGINT, SIGKILL after 10 s) is idempotent. Its config
    and log are in ``folder``."""

    label = "Jaeger"

    def __init__(
        self,
        folder: Path,
        port: int | None = None,
        otlp_port: int | None = None,
        *,
        max_traces: int = MAX_TRACES,
        binary: Path | None = None,
        build: bool = True,
    ) -> None:
        """``binary``: the jaeger program (default: :func:`.jaeger_build.ensure_binary`, which
        builds it once when ``build`` and Go allow)."""
        super().__init__(port)
        self._folder = Path(folder).absolute()
        self._requested_otlp = otlp_port
        self._otlp_port: int | None = otlp_port
        self._grpc_port: int | None = None
        self._max_traces = max_traces
        self._binary = binary
        self._build = build
        self._served = False
        #: Whether its page at ``/`` is the Jaeger UI (None before the first start).
        self.has_ui: bool | None = None

    @property
    def log_path(self) -> Path:
        return self._folder / "jaeger.log"

    @property
    def config_path(self) -> Path:
        return self._folder / "jaeger.yaml"

    @property
    def url(self) -> str:
        """The viewer: its UI at ``/``, its query API under ``/api``."""
        if self._port is None:
            raise EmbeddedError("Jaeger has no port yet; call start() first")
        return f"http://{LOCALHOST}:{self._port}"

    @property
    def otlp_endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` names (the exporter adds ``/v1/traces``)."""
        if self._otlp_port is None:
            raise EmbeddedError("Jaeger has no OTLP port yet; call start() first")
        return f"http://{LOCALHOST}:{self._otlp_port}"

    def start(self) -> str:
        if self.running():
            return self.url
        started = time.monotonic()
        binary = self._binary or ensure_binary(build=self._build)
        ui_assets = ui_assets_from_env()
        self._folder.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, BIND_ATTEMPTS + 1):
            self._choose_ports(fresh=attempt > 1)
            self.config_path.write_text(config_text(self._config(ui_assets)))
            try:
                self._boot(lambda: self._launch(binary), "Jaeger output")
                break
            except EmbeddedError:
                if attempt == BIND_ATTEMPTS or not self._may_move() or not self._bind_failed():
                    raise
                log.warning(
                    "Jaeger's ports were taken at its bind (attempt %d of %d); other ports", attempt, BIND_ATTEMPTS
                )
        self._served = True
        self.has_ui = self._serves_ui()
        log.info("Jaeger %s ready on %s (pid %d) in %.1fs", VERSION, self.url, self.pid, time.monotonic() - started)
        return self.url

    def _config(self, ui_assets: Path | None) -> dict[str, Any]:
        assert self._port is not None and self._otlp_port is not None and self._grpc_port is not None
        return config(
            otlp_port=self._otlp_port,
            query_port=self._port,
            grpc_port=self._grpc_port,
            max_traces=self._max_traces,
            ui_assets=ui_assets,
        )

    def _may_move(self) -> bool:
        """Whether other ports may be taken: none was asked for, and none was ever served on."""
        return self._requested_port is None and self._requested_otlp is None and not self._served

    def _choose_ports(self, *, fresh: bool) -> None:
        """The ports it had (a restart keeps them: the senders know them), else free ones."""
        if fresh:
            self._port = self._otlp_port = self._grpc_port = None
        self._port = pick_port(self._port, "Jaeger's query API")
        self._otlp_port = pick_port(self._otlp_port, "Jaeger's OTLP receiver")
        while self._grpc_port is None or self._grpc_port in (self._port, self._otlp_port):
            self._grpc_port = free_port()

    def _launch(self, binary: Path) -> None:
        self._log_file = open(self.log_path, "a+b")
        self._log_start = self._log_file.seek(0, os.SEEK_END)
        # Its own exporters would read the variables meant for Tickerwire's processes.
        env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
        log.info("starting Jaeger on %s (OTLP %s), log %s", self.url, self.otlp_endpoint, self.log_path)
        try:
            self._process = spawn([str(binary), "--config", str(self.config_path)], log_file=self._log_file, env=env)
        except OSError as exc:
            self.stop()
            raise EmbeddedError(f"cannot run {binary}: {exc}") from exc

    def _wait_ready(self) -> None:
        """Until the query API answers and both the query and OTLP ports are this child's."""
        assert self._process is not None and self._port is not None and self._otlp_port is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self._answers() and self._holds(self._port) and self._holds(self._otlp_port)):
            ensure_running(self._process, "Jaeger")
            if time.monotonic() >= deadline:
                raise EmbeddedError(f"Jaeger did not answer on {self.url}/api/services within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.1)

    def _holds(self, port: int) -> bool:
        assert self._process is not None
        held = listens_on(self._process.pid, port)
        return held if held is not None else accepts_connections(LOCALHOST, port)

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2.0) as answer:
                return answer.read() if answer.status == 200 else None
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def _answers(self) -> bool:
        body = self._get("/api/services")
        return body is not None and b'"data"' in body

    def _serves_ui(self) -> bool:
        page = self._get("/")
        return page is not None and PLACEHOLDER not in page

    def _bind_failed(self) -> bool:
        with open(self.log_path, "rb") as file:
            file.seek(self._log_start)
            return b"address already in use" in file.read()
