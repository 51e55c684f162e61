"""The Jaeger binary the local trace viewer runs (:mod:`.jaeger`): Jaeger v1.75.0, the ``jaeger``
v2 program, OTLP-native.

Found at ``$TICKERWIRE_JAEGER_BIN``, else in the user's cache
(``$XDG_CACHE_HOME/tickerwire`` or ``~/.cache/tickerwire``, in ``jaeger-v1.75.0/jaeger``). When
it is in neither, it is built there once with the machine's ``go`` from the Go module proxy
(``go get -tool`` in a throwaway module, then ``go build``: ``go install pkg@version`` refuses
Jaeger's ``replace`` directives). The build takes minutes (about 400 s and 360 s of CPU on two
cores) and is done by one process at a time under a file lock: a second start waits for it and
then finds the binary. Without Go it is refused in one line that says how to get the binary.

``python -m tickerwire.devstack.embedded.jaeger_build`` builds it ahead of time.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .errors import EmbeddedError

log = logging.getLogger(__name__)

VERSION = "v1.75.0"
PACKAGE = "github.com/jaegertracing/jaeger/cmd/jaeger"
BIN_ENV = "TICKERWIRE_JAEGER_BIN"
#: One step of the build (the module download, then the compile) may take this long at most.
BUILD_STEP_TIMEOUT_S = 1800.0


def cache_dir() -> Path:
    """Where the built binary is kept: ``<cache>/tickerwire/jaeger-v1.75.0``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tickerwire" / f"jaeger-{VERSION}"


def cached_binary() -> Path:
    return cache_dir() / "jaeger"


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binary() -> Path | None:
    """``$TICKERWIRE_JAEGER_BIN`` (refused when it names no runnable file), else the cache's
    binary, else None."""
    if named := os.environ.get(BIN_ENV):
        path = Path(named).expanduser()
        if not _runnable(path):
            raise EmbeddedError(f"{BIN_ENV}={named} is not a runnable file (a jaeger {VERSION} binary)")
        return path
    path = cached_binary()
    return path if _runnable(path) else None


def how_to_get() -> str:
    """The one line a start without the binary and without Go says."""
    return (
        f"Jaeger {VERSION} is not in {cached_binary()} and there is no `go` on PATH to build it there: "
        f"install Go (1.24 or later) and start again (the build takes minutes, once), or set {BIN_ENV} "
        f"to a jaeger {VERSION} binary"
    )


def ensure_binary(*, build: bool = True) -> Path:
    """The binary, built into the cache first when it is missing and ``build`` is true (minutes,
    once). Raises :class:`EmbeddedError` in one line when it cannot be had."""
    if (found := find_binary()) is not None:
        return found
    go = shutil.which("go")
    if go is None or not build:
        raise EmbeddedError(how_to_get())
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait for it
        if _runnable(cached_binary()):
            return cached_binary()
        _build(go, folder)
    return cached_binary()


def _build(go: str, folder: Path) -> None:
    log.warning(
        "building Jaeger %s with %s into %s: this takes minutes (about 7 on two cores), once",
        VERSION,
        go,
        folder,
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".build-", dir=folder) as work:
        module, out = Path(work) / "module", Path(work) / "jaeger"
        module.mkdir()
        env = {**os.environ, "CGO_ENABLED": "0"}
        steps = (
            [go, "mod", "init", "tickerwire.local/jaeger"],
            [go, "get", "-tool", f"{PACKAGE}@{VERSION}"],
            [go, "build", "-o", str(out), PACKAGE],
        )
        for argv in steps:
            _run(argv, module, env)
        os.replace(out, cached_binary())
    log.warning("built Jaeger %s in %.0fs: %s", VERSION, time.monotonic() - started, cached_binary())


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    what = " ".join(argv[1:3])
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EmbeddedError(f"building Jaeger {VERSION}: `go {what}` took over {BUILD_STEP_TIMEOUT_S:.0f}s") from None
    except OSError as exc:
        raise EmbeddedError(f"building Jaeger {VERSION}: cannot run {argv[0]}: {exc}") from None
    if done.returncode != 0:
        said = " / ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise EmbeddedError(f"building Jaeger {VERSION}: `go {what}` failed ({done.returncode}): {said}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(ensure_binary())
    except EmbeddedError as exc:
        print(f"jaeger_build: {exc}", file=sys.stderr)
        sys.exit(1)
