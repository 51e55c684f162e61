"""The state directory of ``tickerwire up``: its lock, held while it runs, and ``up.json``, what
the commands and a developer read of the running stack."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import orjson

from .children import Stack


def write_state(state_file: Path, info: dict, stack: Stack) -> None:
    info["pids"] = {"up": os.getpid(), "children": {c.name: c.proc.pid for c in stack.children if c.proc is not None}}
    tmp = state_file.with_suffix(".tmp")
    # It holds the demo key and the database URL: readable by this user only from its first byte.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), 0o600)  # a left-over .tmp keeps its old mode through O_CREAT
        out.write(orjson.dumps(info, option=orjson.OPT_INDENT_2))
    tmp.replace(state_file)


def lock_state_dir(state_dir: Path):
    """Take the state dir's lock before anything is touched; None if another ``up`` holds it.

    The lock (``flock`` on ``up.lock``) is released by the kernel when this process ends,
    however it ends, so a crashed ``up`` never blocks the next one."""
    import fcntl

    fd = os.open(state_dir / "up.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def lock_holder(state_dir: Path) -> str:
    with contextlib.suppress(OSError):
        pid = (state_dir / "up.lock").read_text().strip()
        if pid:
            return f" (pid {pid})"
    return ""
