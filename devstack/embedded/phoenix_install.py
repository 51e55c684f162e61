"""The Phoenix install the local trace viewer runs (:mod:`.phoenix`): Arize Phoenix 20.26.1
(``arize-phoenix`` on PyPI) in a virtual environment of its own, never in Tickerwire's: it is
big (about 860 MB) and pins many packages.

It lives at ``$TICKERWIRE_PHOENIX_HOME``, else in the user's cache (``$XDG_CACHE_HOME/tickerwire``
or ``~/.cache/tickerwire``, in ``phoenix-20.26.1``). When it is not there it is installed there
once, with this interpreter's ``venv`` and then that environment's own ``pip`` (about 3 minutes
with a cold pip cache), by one process at a time under a file lock: a second start waits for it
and then finds the install. A failed ``pip`` is said in one line; the environment it leaves is
reused (pip finishes the job) by the next start.

``python -m tickerwire.devstack.embedded.phoenix_install`` installs it ahead of time.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from .errors import EmbeddedError

log = logging.getLogger(__name__)

VERSION = "20.26.1"
REQUIREMENT = f"arize-phoenix=={VERSION}"
HOME_ENV = "TICKERWIRE_PHOENIX_HOME"
#: Creating the environment, then pip's install, may each take this long at most.
INSTALL_STEP_TIMEOUT_S = 1800.0


def home() -> Path:
    """Where the install is: ``$TICKERWIRE_PHOENIX_HOME``, else ``<cache>/tickerwire/phoenix-20.26.1``."""
    if named := os.environ.get(HOME_ENV):
        return Path(named).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tickerwire" / f"phoenix-{VERSION}"


def python(folder: Path) -> Path:
    """The interpreter of the environment at ``folder``."""
    return folder / "bin" / "python"


def installed(folder: Path) -> bool:
    """Whether ``folder`` holds an environment with Phoenix 20.26.1 installed (pip writes the
    package's metadata once the package, the last of its install, is in place)."""
    return os.access(python(folder), os.X_OK) and any(
        folder.glob(f"lib/python3*/site-packages/arize_phoenix-{VERSION}.dist-info/METADATA")
    )


def ensure_installed(*, interpreter: str = sys.executable) -> Path:
    """The install's folder, installed first when it is missing (minutes, once). ``interpreter``
    makes the environment (``-m venv``). Raises :class:`EmbeddedError` in one line when it cannot
    be had."""
    folder = home()
    if installed(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing it: wait for it
        if not installed(folder):
            _install(interpreter, folder)
    return folder


def _install(interpreter: str, folder: Path) -> None:
    if folder.exists() and any(folder.iterdir()) and not (folder / "pyvenv.cfg").is_file():
        raise EmbeddedError(
            f"{folder} is neither empty nor a virtual environment: remove it, or set {HOME_ENV} to another folder"
        )
    log.warning("installing Phoenix %s into %s: about 3 minutes and 860 MB, once", VERSION, folder)
    started = time.monotonic()
    if not os.access(python(folder), os.X_OK):
        _run([interpreter, "-m", "venv", str(folder)], "creating its virtual environment")
    quiet = ["--disable-pip-version-check", "--no-input", "--quiet"]
    _run([str(python(folder)), "-m", "pip", "install", *quiet, REQUIREMENT], "pip install")
    if not installed(folder):
        raise EmbeddedError(f"installing Phoenix {VERSION} into {folder}: pip succeeded and left no {REQUIREMENT}")
    log.warning("installed Phoenix %s in %.0fs: %s", VERSION, time.monotonic() - started, folder)


def _run(argv: list[str], what: str) -> None:
    where = f"installing Phoenix {VERSION} into {home()}"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EmbeddedError(f"{where}: {what} took over {INSTALL_STEP_TIMEOUT_S:.0f}s") from None
    except OSError as exc:
        raise EmbeddedError(f"{where}: cannot run {argv[0]}: {exc}") from None
    if done.returncode != 0:
        said = " / ".join(line.strip() for line in (done.stdout + done.stderr).strip().splitlines()[-3:])
        raise EmbeddedError(f"{where}: {what} failed (exit {done.returncode}): {said}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(ensure_installed())
    except EmbeddedError as exc:
        print(f"phoenix_install: {exc}", file=sys.stderr)
        sys.exit(1)
