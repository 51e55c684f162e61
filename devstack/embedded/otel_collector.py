"""A real OpenTelemetry Collector run as a child process: OTLP over HTTP in on
``127.0.0.1:port``, every span it receives written out as OTLP JSON, one line a batch, to
spans.jsonl in its folder. The tests' trace backend.

The binary comes from :mod:`.otelcol_build` (built once with the machine's Go, or named by
``$TICKERWIRE_OTELCOL_BIN``). Its configuration is written at each start into its folder
(config.yaml, written as JSON, which YAML reads as it is): the receiver's HTTP protocol only,
the file exporter flushing every 100 ms and appending (a restart keeps what was received), and
the collector's own telemetry quiet: its log at ``info`` (its ready line) in ``otelcol.log``, no
metrics and no traces of its own, so the receiver's port is the only one it opens.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from . import otelcol_build
from .child import DataDirServer
from .errors import EmbeddedError
from .ports import LOCALHOST, accepts_connections, ensure_running, free_port, listens_on, pick_port, spawn

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
#: What the collector logs once every pipeline runs.
READY_LINE = b"Everything is ready"
#: Starts on a port that was free when checked but taken at the collector's own bind.
BIND_ATTEMPTS = 3
FLUSH_INTERVAL = "100ms"


def unavailable() -> str | None:
    """Why no collector can run here (no Go to build it, no binary), or None."""
    return otelcol_build.why_unbuildable()


def binary() -> Path:
    """The collector binary, built first when needed. Raises EmbeddedError naming the cause."""
    try:
        return otelcol_build.find_or_build()
    except otelcol_build.BuildError as exc:
        raise EmbeddedError(str(exc)) from None


class OtelCollector(DataDirServer):
    """One OpenTelemetry Collector receiving OTLP/HTTP on ``127.0.0.1:port``, its folder holding
    its configuration, its log and spans.jsonl. ``start()`` returns the endpoint once the
    collector logged that it is ready and the port accepts connections; ``stop()`` is
    idempotent, and a later ``start()`` takes the same port again."""

    label = "OpenTelemetry Collector"
    log_name = "otelcol.log"

    def __init__(self, data_dir: Path, port: int | None = None, log_path: Path | None = None) -> None:
        super().__init__(data_dir, port, log_path)

    @property
    def endpoint(self) -> str:
        """The base URL of OTEL_EXPORTER_OTLP_ENDPOINT (traces go to ``<endpoint>/v1/traces``)."""
        if self._port is None:
            raise EmbeddedError("the OpenTelemetry Collector has no port yet; call start() first")
        return f"http://{LOCALHOST}:{self._port}"

    @property
    def spans_path(self) -> Path:
        """The file exporter's output: OTLP JSON, one ``{"resourceSpans": [...]}`` a line."""
        return self._data_dir / "spans.jsonl"

    def start(self) -> str:
        if self.running():
            return self.endpoint
        started = time.monotonic()
        program = binary()
        first = self._port is None
        self._port = pick_port(self._port, self.label)
        self._data_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, BIND_ATTEMPTS + 1):
            config = self.write_config()
            try:
                self._boot(lambda: self._launch(program, config), "OpenTelemetry Collector output")
                break
            except EmbeddedError:
                # A port of our own choosing that another process took first: choose again.
                if attempt == BIND_ATTEMPTS or not (first and self._requested_port is None and self._bind_failed()):
                    raise
                log.warning("the collector's port %d was taken at its bind; choosing another", self._port)
                self._port = free_port()
        log.info(
            "OpenTelemetry Collector ready on %s (pid %d) in %.1fs", self.endpoint, self.pid, time.monotonic() - started
        )
        return self.endpoint

    def write_config(self) -> Path:
        """Write config.yaml into the folder (at each start) and return its path."""
        config = {
            "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"{LOCALHOST}:{self._port}"}}}},
            "exporters": {
                "file": {
                    "path": str(self.spans_path),
                    "format": "json",
                    "append": True,
                    "flush_interval": FLUSH_INTERVAL,
                }
            },
            "service": {
                "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
                "telemetry": {
                    "logs": {
                        "level": "info",
                        "encoding": "console",
                        "disable_caller": True,
                        "disable_stacktrace": True,
                        "sampling": {"enabled": False},
                    },
                    "metrics": {"level": "none", "readers": []},
                    "traces": {"level": "none"},
                },
            },
        }
        path = self._data_dir / "config.yaml"
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    def _launch(self, program: Path, config: Path) -> None:
        log_file = self._open_log()
        log.info("starting the OpenTelemetry Collector on %s, spans to %s", self.endpoint, self.spans_path)
        try:
            self._process = spawn([str(program), "--config", f"file:{config}"], log_file=log_file)
        except OSError as exc:
            self.stop()
            raise EmbeddedError(f"cannot run {program}: {exc}") from exc

    def _wait_ready(self) -> None:
        """Until the collector logged its ready line (this start's part of the log) and its
        own process listens on the receiver's port."""
        assert self._process is not None and self._port is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (READY_LINE in self._this_start() and self._serving()):
            ensure_running(self._process, self.label)
            if time.monotonic() >= deadline:
                raise EmbeddedError(
                    f"the OpenTelemetry Collector did not start on port {self._port} within {START_TIMEOUT_S:.0f}s"
                )
            time.sleep(0.05)

    def _serving(self) -> bool:
        assert self._process is not None and self._port is not None
        return listens_on(self._process.pid, self._port) is not False and accepts_connections(LOCALHOST, self._port)

    def _bind_failed(self) -> bool:
        return b"address already in use" in self._this_start()
