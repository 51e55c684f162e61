"""Local TCP ports and the child processes that listen on them.

Shared by the embedded PostgreSQL server and Apache Kafka: choosing a port,
checking that nobody else holds it, waiting until a child accepts connections, and
stopping a child without leaving it behind.
"""

from __future__ import annotations

import ctypes
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Callable, Mapping, Sequence

from .errors import EmbeddedError

log = logging.getLogger(__name__)

LOCALHOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


#: Where :func:`free_port` looks when the kernel's ephemeral range cannot be read.
EPHEMERAL_FALLBACK = (32768, 60999)
#: The lowest port :func:`free_port` hands out.
LOWEST_PORT = 10000
#: Ports :func:`free_port` tries before it gives up on the range below the ephemeral one.
PROBES = 200


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel gives outgoing connections (and ``bind(0)``) on this machine."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = f.read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return EPHEMERAL_FALLBACK


def free_port(host: str = LOCALHOST) -> int:
    """Return a port nobody holds right now, from below the kernel's ephemeral range.

    Below it, because a port found by ``bind(0)`` comes from the range every outgoing
    connection takes its local port from: on a busy machine a client socket would take it
    before the server binds it, and a server restarted on its old port would find it gone.
    Below the range only another caller of this function can take it (one chance in
    thousands, and only in the moment between the probe and the server's bind), so callers
    that start a server on it must still detect a failed bind. Falls back to ``bind(0)``
    when the range below is too small or full.
    """
    low, _ = ephemeral_range()
    top = low - 1
    if top - LOWEST_PORT >= 1000:
        for _ in range(PROBES):
            port = random.randint(LOWEST_PORT, top)
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_ports(count: int, host: str = LOCALHOST) -> list[int]:
    """``count`` distinct free ports (two :func:`free_port` calls in a row can be the same)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


def _bindable(host: str, port: int) -> bool:
    """True if nothing holds ``host:port`` at all, not even a connection in TIME_WAIT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_is_free(port: int, host: str = LOCALHOST) -> bool:
    """True if a server could listen on ``host:port`` now.

    ``SO_REUSEADDR`` is set, like servers do, so that connections lingering in
    TIME_WAIT after a server stopped do not count as "busy"; a live listener does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(port: int | None, what: str, host: str = LOCALHOST) -> int:
    """Return ``port`` if it is free, a fresh ephemeral port if it is ``None``.

    Raises :class:`EmbeddedError` when a requested port is taken.
    """
    if port is None:
        return free_port(host)
    if not port_is_free(port, host):
        raise EmbeddedError(f"cannot start {what}: port {host}:{port} is already in use")
    return port


def accepts_connections(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(
    host: str,
    port: int,
    timeout: float = 10.0,
    *,
    process: subprocess.Popen | None = None,
    what: str = "server",
) -> None:
    """Block until ``host:port`` accepts TCP connections.

    If ``process`` is given and exits meanwhile, fail at once instead of waiting for
    the timeout. Raises :class:`EmbeddedError` on exit or timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        ensure_running(process, what)
        if accepts_connections(host, port):
            return
        if time.monotonic() >= deadline:
            raise EmbeddedError(f"{what} did not accept connections on {host}:{port} within {timeout:.0f}s")
        time.sleep(0.02)


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds a listening TCP socket on ``port``; None where /proc cannot tell.

    Tells our child apart from another server that grabbed the same port.
    """
    try:
        inodes = _listening_socket_inodes(port)
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[len("socket:[") : -1] in inodes:
            return True
    return False


def _listening_socket_inodes(port: int) -> set[str]:
    """Inodes of TCP sockets in LISTEN state on ``port``, from /proc/net/tcp{,6}."""
    tables = [table for table in ("/proc/net/tcp", "/proc/net/tcp6") if os.path.exists(table)]
    if not tables:
        raise FileNotFoundError("/proc/net/tcp")
    inodes: set[str] = set()
    for table in tables:
        with open(table) as rows:
            next(rows)  # header
            for row in rows:
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def ensure_running(process: subprocess.Popen | None, what: str) -> None:
    """Raise :class:`EmbeddedError` if ``process`` has already exited."""
    if process is not None and process.poll() is not None:
        raise EmbeddedError(f"{what} exited during start-up with status {process.returncode}")


def spawn(
    argv: Sequence[str],
    *,
    log_file: IO[bytes],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    user: int | None = None,
    group: int | None = None,
) -> subprocess.Popen:
    """Start a long-running child that this process owns and must stop.

    The child gets its own session, so a terminal Ctrl-C reaches only us and we stop
    children in order. On Linux, when called from the main thread, the child is also
    sent SIGINT if we die without stopping it (``PR_SET_PDEATHSIG``), so a killed parent
    leaves no orphans. (From other threads this is skipped: the signal fires when the
    *thread* that forked exits.) ``user``/``group`` drop privileges, for root.
    """
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        user=user,
        group=group,
        extra_groups=[] if user is not None else None,
        start_new_session=True,
        preexec_fn=_parent_death_signal(),
    )


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` arming SIGINT-on-parent-death, or None where that is unsafe or unsupported."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # an inherited SIG_IGN would make SIGINT a no-op
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGINT), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return arm


def stop_process(process: subprocess.Popen, what: str, timeout: float = 10.0) -> None:
    """Stop a child: SIGINT, wait up to ``timeout`` seconds, then SIGKILL. Reaps it."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) ignored SIGINT for %.0fs; killing it", what, process.pid, timeout)
            process.kill()
            process.wait()
    log.info("%s (pid %d) stopped with status %s", what, process.pid, process.returncode)


def tail(stream: IO[bytes] | None, limit: int = 4000) -> str:
    """The last ``limit`` bytes of a seekable binary log file, decoded, for error messages."""
    if stream is None:
        return ""
    stream.flush()
    stream.seek(0, 2)
    size = stream.tell()
    stream.seek(max(0, size - limit))
    return stream.read().decode("utf-8", "replace").strip()


def resident_bytes(pid: int | None) -> int | None:
    """The resident memory (VmRSS) of process ``pid``, or None where /proc cannot tell."""
    if pid is None:
        return None
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None
