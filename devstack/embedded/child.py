"""What every embedded server shares: one child process, started once, stopped idempotently
(also at interpreter exit), usable as a context manager."""

from __future__ import annotations

import atexit
import os
import subprocess
from pathlib import Path
from types import TracebackType
from typing import IO, Callable

from .errors import EmbeddedError
from .ports import stop_process, tail

STOP_TIMEOUT_S = 10.0


class ChildServer:
    """Base of the embedded servers. Subclasses launch ``self._process`` and implement ``_wait_ready``."""

    #: How the server is named in logs and errors.
    label = "server"

    def __init__(self, port: int | None) -> None:
        self._requested_port = port
        self._port: int | None = port
        self._process: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def port(self) -> int | None:
        """The TCP port; ``None`` before the first start when no port was requested."""
        return self._port

    @property
    def pid(self) -> int | None:
        """The server's pid while this object runs it, else ``None``."""
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _wait_ready(self) -> None:
        raise NotImplementedError

    def _boot(self, launch: Callable[[], None], log_name: str) -> None:
        """Launch, wait until ready; on any failure stop the child and explain with its log."""
        launch()
        try:
            self._wait_ready()
        except BaseException as exc:
            detail = tail(self._log_file)
            self.stop()
            if isinstance(exc, EmbeddedError):
                raise EmbeddedError(f"{exc}\n--- {log_name} ---\n{detail}") from None
            raise
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop the server (SIGINT, SIGKILL after 10 s). Safe to call twice."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is not None:
            stop_process(process, self.label, STOP_TIMEOUT_S)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self):
        self.start()  # type: ignore[attr-defined]
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class DataDirServer(ChildServer):
    """An embedded server that keeps its data in a folder, and by default its log there too
    (``log_name``): a second start on the same folder finds its data again."""

    log_name = "server.log"

    def __init__(self, data_dir: Path, port: int | None, log_path: Path | None) -> None:
        super().__init__(port)
        self._data_dir = Path(data_dir).absolute()
        self._log_path = Path(log_path).absolute() if log_path else self._data_dir / self.log_name
        #: Where this start's part of the log begins (the file keeps earlier starts' lines).
        self._log_start = 0

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def log_path(self) -> Path:
        return self._log_path

    def _open_log(self) -> IO[bytes]:
        """Open the log for a start, appending; this start's part begins at its end."""
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self._log_path, "a+b")
        self._log_start = self._log_file.seek(0, os.SEEK_END)
        return self._log_file

    def _this_start(self) -> bytes:
        """What the server logged since this start."""
        with open(self._log_path, "rb") as file:
            file.seek(self._log_start)
            return file.read()
