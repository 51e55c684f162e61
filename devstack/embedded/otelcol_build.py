"""The OpenTelemetry Collector the tests send spans to, built from its Go source in ``otelcol/``
(``main.go``, ``go.mod``, ``go.sum``: the OTLP receiver and the file exporter, every collector
module at one release) with the machine's Go, into the user's cache:
``$XDG_CACHE_HOME/tickerwire/otelcol-<version>/otelcol`` (else ``~/.cache/...``).

One build per source: a file beside the binary holds the SHA-256 of the source it was built
from, and a changed source is built again. Parallel test workers build once (a file lock; the
others wait, then find the binary). ``$TICKERWIRE_OTELCOL_BIN`` names a binary to use instead
(built elsewhere, with at least the ``otlp`` receiver and the ``file`` exporter): nothing is built.

Standard library only, so that CI can build it before any virtual environment exists:
``python3 devstack/embedded/otelcol_build.py`` builds (or finds) it and prints its path.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = Path(__file__).parent / "otelcol"
SOURCE_FILES = ("main.go", "go.mod", "go.sum")
BINARY_ENV = "TICKERWIRE_OTELCOL_BIN"
#: A cold build (every module fetched from the Go module proxy) took 5.5 min here with the
#: machine's two cores shared; a warm module cache about half that.
BUILD_TIMEOUT_S = 1500.0


class BuildError(Exception):
    """The collector binary cannot be had: no Go to build it, or its build failed."""


def collector_release() -> str:
    """The collector release ``otelcol/main.go`` is built at (its ``version`` constant)."""
    found = re.search(r'^const version = "([^"]+)"', (SOURCE / "main.go").read_text(), re.MULTILINE)
    if found is None:
        raise BuildError(f"{SOURCE / 'main.go'} declares no `const version`")
    return found.group(1)


def build_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tickerwire" / f"otelcol-{collector_release()}"


def source_digest() -> str:
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update(name.encode() + b"\0" + (SOURCE / name).read_bytes() + b"\0")
    return digest.hexdigest()


def ready_binary() -> Path | None:
    """The binary to run without building: ``$TICKERWIRE_OTELCOL_BIN``, or the cache's when it
    was built from the source as it is now; else None."""
    if override := os.environ.get(BINARY_ENV):
        return Path(override)
    binary = build_dir() / "otelcol"
    stamp = build_dir() / "otelcol.source"
    try:
        fresh = stamp.read_text().strip() == source_digest() and os.access(binary, os.X_OK)
    except OSError:
        return None
    return binary if fresh else None


def why_unbuildable() -> str | None:
    """Why no collector can be had here (no binary and no Go to build one), or None."""
    if ready_binary() is not None or shutil.which("go") is not None:
        return None
    return (
        f"no OpenTelemetry Collector: Go (`go`) is not on PATH to build it from {SOURCE}, "
        f"none is built in {build_dir()}, and {BINARY_ENV} is not set"
    )


def find_or_build() -> Path:
    """The collector binary: the override, the cache's, or built now (once, under a lock)."""
    if (found := ready_binary()) is not None:
        if os.environ.get(BINARY_ENV) and not os.access(found, os.X_OK):
            raise BuildError(f"{BINARY_ENV}={found} is not an executable file")
        return found
    if (reason := why_unbuildable()) is not None:
        raise BuildError(reason)
    folder = build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait for it
        if (found := ready_binary()) is None:
            found = _build(folder)
    return found


def _build(folder: Path) -> Path:
    """Build in a copy of the source (the checkout stays as it is), log in ``build.log``; the
    binary takes its name only once whole, then the stamp of its source is written."""
    log_path = folder / "build.log"
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=folder))
    try:
        for name in SOURCE_FILES:
            shutil.copy2(SOURCE / name, work / name)
        argv = ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(work / "otelcol"), "."]
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        started = time.monotonic()
        with open(log_path, "wb") as log:
            log.write(f"$ GOFLAGS=-mod=mod {' '.join(argv)}  (in a copy of {SOURCE})\n".encode())
            log.flush()
            try:
                done = subprocess.run(
                    argv, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                raise BuildError(
                    f"building the OpenTelemetry Collector took over {BUILD_TIMEOUT_S:.0f} s; see {log_path}"
                ) from None
            except OSError as exc:
                raise BuildError(f"cannot run go to build the OpenTelemetry Collector: {exc}") from None
        if done.returncode != 0:
            said = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise BuildError(
                f"building the OpenTelemetry Collector failed (go build exited {done.returncode}; "
                f"all of it in {log_path}): " + " / ".join(said)
            )
        os.replace(work / "otelcol", folder / "otelcol")
        (folder / "otelcol.source").write_text(source_digest() + "\n")
        with open(log_path, "a") as log:
            log.write(f"built in {time.monotonic() - started:.0f} s\n")
        return folder / "otelcol"
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        print(find_or_build())
    except BuildError as exc:
        print(f"otelcol_build: {exc}", file=sys.stderr)
        sys.exit(1)
