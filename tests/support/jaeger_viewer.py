"""What the trace viewer's tests share: the Jaeger binary (or the reason there is none), the
addresses a process listens on, and a lookup of one trace in the viewer's query API."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tickerwire.devstack.embedded.jaeger_build import ensure_binary, find_binary, how_to_get


def jaeger_binary() -> Path:
    """The jaeger binary, built once when this machine has Go and none yet (minutes); the
    calling test skips, saying how to get it, when it has neither."""
    if find_binary() is None and shutil.which("go") is None:
        pytest.skip(how_to_get())
    return ensure_binary()


def _hex_address(field: str) -> tuple[str, int]:
    address, port = field.rsplit(":", 1)
    if len(address) == 8:  # IPv4, little-endian
        return ".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)), int(port, 16)
    return f"[{address}]", int(port, 16)


def listeners_of(pid: int) -> list[tuple[str, int]]:
    """The (address, port) of every listening TCP socket process ``pid`` holds (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    found.append(_hex_address(fields[1]))
    return sorted(found)


def trace(viewer_url: str, trace_id: str, timeout: float = 0.0) -> dict | None:
    """The trace ``trace_id`` as the query API gives it (``/api/traces/{id}``), waiting up to
    ``timeout`` seconds for it to arrive; None when it does not."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{viewer_url}/api/traces/{trace_id}", timeout=2.0) as answer:
                return json.loads(answer.read())["data"][0]
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)
