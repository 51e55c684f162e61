"""PgBouncer (Debian's package) in transaction mode in front of a test PostgreSQL.

:class:`Bouncer` runs one on a free loopback port, forwarding every database name to the same
name on the server (the ``*`` entry), with trust authentication as the embedded PostgreSQL has
(the user must still be listed in the auth file), and the read model's search_path set on each
server connection (``connect_query``): the shape docs/operations.md (PgBouncer) describes.

With ``TICKERWIRE_TEST_PGBOUNCER=1``, tests/conftest.py's ``pg_dsn`` starts one for the session
and :func:`routed` gives the services both URLs of a scratch database: the pooler's as
``TICKERWIRE_DATABASE_URL``, PostgreSQL's as ``TICKERWIRE_DATABASE_DIRECT_URL`` (what must
bypass the pooler). Without it, :func:`routed` changes nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tickerwire.devstack.embedded.ports import accepts_connections, free_port
from tickerwire.devstack.embedded.postgres import ensure_traversable, service_account
from tickerwire.services.common.db import create_pool

#: Set to 1 to run the services of the PostgreSQL-touching suites through a session PgBouncer.
ENABLE = "TICKERWIRE_TEST_PGBOUNCER"
LOCALHOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
#: Server connections per (database, user): fewer than the clients' pools add up to, so the
#: tests share server connections between clients as production does.
POOL_SIZE = 8


def binary() -> str | None:
    """The pgbouncer executable (Debian installs it in /usr/sbin), or None."""
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )


def enabled() -> bool:
    return os.environ.get(ENABLE, "") == "1"


class Bouncer:
    """A PgBouncer in transaction mode in front of the PostgreSQL of ``server_dsn`` (trust auth)."""

    def __init__(self, server_dsn: str, schema: str = "rm", pool_size: int = POOL_SIZE) -> None:
        self.server = urlsplit(server_dsn)
        self.schema, self.pool_size = schema, pool_size
        self.port = 0
        self.dir = Path(tempfile.mkdtemp(prefix="tickerwire-pgbouncer-"))
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Bouncer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, direct_dsn: str) -> str:
        """``direct_dsn`` (a database on this bouncer's server) through the pooler."""
        parts = urlsplit(direct_dsn)
        user = parts.netloc.rpartition("@")[0]
        return urlunsplit(
            parts._replace(netloc=f"{user}@{LOCALHOST}:{self.port}" if user else f"{LOCALHOST}:{self.port}")
        )

    def fronts(self, dsn: str) -> bool:
        parts = urlsplit(dsn)
        return (parts.hostname, parts.port) == (self.server.hostname, self.server.port)

    def start(self) -> None:
        exe = binary()
        if exe is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self.port = free_port(LOCALHOST)
        user = self.server.username or "postgres"
        (self.dir / "userlist.txt").write_text(f'"{user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            f"""[databases]
* = host={self.server.hostname} port={self.server.port} connect_query='SET search_path = "{self.schema}", public'

[pgbouncer]
listen_addr = {LOCALHOST}
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir / "userlist.txt"}
pool_mode = transaction
default_pool_size = {self.pool_size}
max_client_conn = 2000
server_reset_query =
query_wait_timeout = 15
server_connect_timeout = 5
logfile = {self.dir / "pgbouncer.log"}
pidfile = {self.dir / "pgbouncer.pid"}
"""
        )
        command = [exe, str(self.dir / "pgbouncer.ini")]
        account = service_account()  # PgBouncer refuses to run as root
        if account is not None:
            ensure_traversable(self.dir)
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            for f in self.dir.iterdir():
                os.chown(f, account.pw_uid, account.pw_gid)
            command[1:1] = ["-u", account.pw_name]
        # It logs to its logfile (read by log()); stderr would be a pipe nobody drains.
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        atexit.register(self.stop)  # a test process that dies leaves no pooler behind
        deadline = time.monotonic() + START_TIMEOUT_S
        while not accepts_connections(LOCALHOST, self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                said = self.log()[-2000:]
                self.stop()
                raise RuntimeError(f"pgbouncer did not start within {START_TIMEOUT_S:g} s: {said}")
            time.sleep(0.05)

    def log(self) -> str:
        try:
            return (self.dir / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # immediate shutdown
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


#: The session's bouncer (tests/conftest.py's ``pg_dsn`` under ``TICKERWIRE_TEST_PGBOUNCER=1``).
_SESSION: list[Bouncer] = []


def use_for_session(bouncer: Bouncer | None) -> None:
    _SESSION[:] = [bouncer] if bouncer is not None else []


def routed(dsn: str, bouncer: Bouncer | None = None) -> dict[str, str]:
    """The database settings of services on ``dsn``: through ``bouncer`` (or the session's) when
    one fronts its server, ``dsn`` itself as the direct URL; else ``dsn`` alone."""
    bouncer = bouncer or (_SESSION[0] if _SESSION else None)
    if bouncer is None or not bouncer.fronts(dsn):
        return {"database_url": dsn}
    return {"database_url": bouncer.url(dsn), "database_direct_url": dsn}


def routed_env(dsn: str, bouncer: Bouncer | None = None) -> dict[str, str]:
    """:func:`routed` as ``TICKERWIRE_*`` variables."""
    return {"TICKERWIRE_" + k.upper(): v for k, v in routed(dsn, bouncer).items()}


async def routed_pool(dsn: str, schema: str = "rm", **kw: Any) -> asyncpg.Pool:
    """A service's pool on ``dsn``: through the session's PgBouncer, if any, as :func:`routed` says."""
    settings = routed(dsn)
    return await create_pool(settings["database_url"], schema, pooled="database_direct_url" in settings, **kw)
