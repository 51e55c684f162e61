"""PostgreSQL plumbing shared by the services: the one way to get a pool or a connection, and
the translation of connection failures into :class:`StorageUnavailable`.

Nothing else in the product calls ``asyncpg.connect`` or ``asyncpg.create_pool``. What the
read model's tables mean (migrations, positions, ...) lives in :mod:`tickerwire.services.readmodel`."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator, Awaitable, Callable, Protocol, TypeVar

import asyncpg

from ..runtime.config import Config
from ..runtime.errors import ConfigError, StorageUnavailable
from ..runtime.retry import Failing, retry_transient

#: Errors that mean "the database is not there right now", as opposed to a bug in a statement.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.InvalidCachedStatementError,
    # A connection the server dropped mid-operation (e.g. across a PostgreSQL restart).
    asyncpg.exceptions.InternalClientError,
    TimeoutError,
)


class Queryable(Protocol):
    """A pool or a connection: what reads that work on either need."""

    async def fetch(self, query: str, *args: object, timeout: float | None = None) -> list: ...


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (a schema name put into a statement or a setting)."""
    return '"' + name.replace('"', '""') + '"'


@contextlib.contextmanager
def storage_errors(what: str):
    """Translate connection-level database failures into :class:`StorageUnavailable`."""
    try:
        yield
    except asyncpg.exceptions.ClientConfigurationError as exc:  # an InterfaceError, but no retry fixes it
        raise ConfigError(f"{what}: the database URL (TICKERWIRE_DATABASE_URL) is invalid: {exc}") from exc
    except TimeoutError as exc:  # an OSError too: a bound on the client gave up waiting
        raise StorageUnavailable(
            f"{what}: gave up waiting (TimeoutError: no free pooled connection, or no answer "
            "from PostgreSQL, within the bound)"
        ) from exc
    except CONNECTION_ERRORS as exc:
        raise StorageUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset for readers that never change session state: nothing to undo, so no round trip
    (asyncpg still rolls back a transaction left open)."""


async def create_pool(
    dsn: str,
    schema: str,
    *,
    min_size: int = 2,
    max_size: int = 10,
    stateless: bool = False,
    statement_timeout_s: float = 30.0,
    connect_timeout_s: float = 10.0,
    synchronous_commit: str | None = None,
    pooled: bool = False,
) -> asyncpg.Pool:
    """A pool whose connections resolve unqualified names in the read-model schema first.

    ``stateless`` pools belong to processes that never SET, LISTEN or take session locks;
    their connections skip asyncpg's reset statement when returned to the pool.
    ``statement_timeout_s`` bounds every statement twice: on the server (``statement_timeout``)
    and in the client (``command_timeout``, which also holds when the server is frozen).
    ``synchronous_commit`` sets the sessions' ``synchronous_commit`` (None: the server's); with
    ``off`` a COMMIT returns, and is visible to others, before its WAL is flushed, and a crash of
    PostgreSQL may lose the last instant of commits, each whole.

    ``pooled``: ``dsn`` is a transaction-mode pooler (PgBouncer), which hands each transaction
    (and each statement outside one) to any of its server connections. The pool then sends no
    session settings (PgBouncer refuses them in the start-up packet, and a ``SET`` would land on
    whichever server connection ran it), prepares no named statements (asyncpg re-parses each
    one, ``statement_cache_size=0``), and checks that the pooler's server connections resolve
    names in ``schema`` (its ``connect_query`` sets the search_path: docs/operations.md,
    PgBouncer). The statement timeout holds in the client, which cancels the statement through
    the pooler; ``synchronous_commit`` and the server's statement timeout apply to a write
    transaction through :func:`begin_local` (``SET LOCAL``)."""
    settings = {"application_name": "tickerwire"}
    local = {"statement_timeout": str(int(statement_timeout_s * 1000))}
    if synchronous_commit is not None:
        local["synchronous_commit"] = synchronous_commit
    if not pooled:
        settings |= {"search_path": quote_ident(schema) + ",public", **local}
    with storage_errors("connect"):
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            reset=_keep_session if stateless or pooled else None,
            server_settings=settings,
            command_timeout=statement_timeout_s,
            timeout=connect_timeout_s,
            connection_class=_PooledConnection if pooled else asyncpg.Connection,
            init=_local_settings(local) if pooled else None,
            statement_cache_size=0 if pooled else 100,
        )
    if pooled:
        await _check_search_path(pool, schema, connect_timeout_s)
    return pool


class _PooledConnection(asyncpg.Connection):
    """A connection to a transaction-mode pooler: the settings a direct session would keep for
    its life, applied by :func:`begin_local` to each write transaction instead."""

    local_settings: dict[str, str] = {}


def _local_settings(local: dict[str, str]):
    async def init(conn: asyncpg.Connection) -> None:
        conn.local_settings = local

    return init


async def begin_local(conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy) -> None:
    """First statement of a write transaction on a pooled connection (:func:`create_pool`'s
    ``pooled``): its pool's session settings, for this transaction only (``SET LOCAL``); nothing
    on a direct connection, whose session has them."""
    local: dict[str, str] = getattr(conn, "local_settings", None) or {}
    if local:
        names, values = list(local), list(local.values())
        await conn.execute(
            "SELECT set_config(n, v, true) FROM unnest($1::text[], $2::text[]) AS s(n, v)", names, values
        )


async def _check_search_path(pool: asyncpg.Pool, schema: str, timeout_s: float) -> None:
    """A pooler whose server connections do not resolve names in ``schema`` first would answer
    every read with "relation does not exist": refused at start-up instead, with the fix."""
    with storage_errors("connect"):
        path = str(await pool.fetchval("SELECT current_setting('search_path')", timeout=timeout_s))
    current = path.split(",")[0].strip()
    if current not in (schema, quote_ident(schema)):
        await pool.close()
        raise ConfigError(
            f"TICKERWIRE_DATABASE_URL is a pooler (TICKERWIRE_DATABASE_DIRECT_URL is set) whose server "
            f"connections' search_path is {path!r}, which does not start with the read model's schema {schema!r}: set "
            f"connect_query = 'SET search_path = {quote_ident(schema)}, public' on its database entry "
            "(docs/operations.md, PgBouncer)"
        )


#: What a service retries while it has no pool yet (``retry_transient``'s ``what``); readiness
#: names the last failure of it (the service's :class:`~..runtime.retry.Failing`).
CONNECT_POSTGRES = "connect to PostgreSQL"
#: The longest pause between two attempts to connect (full jitter below it, :mod:`..runtime.retry`).
CONNECT_BACKOFF_CAP_S = 2.0

T = TypeVar("T")


async def retry_connect(
    connect_op: Callable[[], Awaitable[T]],
    *,
    what: str = CONNECT_POSTGRES,
    failing: Failing | None = None,
    within_s: float | None = None,
) -> T:
    """The one rule for connecting to PostgreSQL, a service's pool and a command's session alike:
    ``connect_op`` retried while it fails with :class:`StorageUnavailable` (PostgreSQL down or
    restarting, no host of a multi-host URL writable yet during a failover), with capped,
    jittered backoff. A service retries for as long as it takes (``within_s=None``); a command
    within ``within_s``, quietly, then the last failure is raised for its one line."""
    return await retry_transient(
        connect_op,
        what=what,
        cap=CONNECT_BACKOFF_CAP_S,
        failing=failing,
        within_s=within_s,
        quiet=within_s is not None,
    )


async def reader_pool(
    config: Config, failing: Failing | None = None, synchronous_commit: str | None = None
) -> asyncpg.Pool:
    """The pool of a reading service (API, stream), connecting with retries until PostgreSQL answers.

    Its statements are bounded by ``db_statement_timeout_s`` and its connection attempts by
    ``db_connect_timeout_s``, so a frozen database turns into a prompt 503, not a stall.
    ``synchronous_commit``: as :func:`create_pool`'s (a service whose few writes must survive a
    crash of PostgreSQL, such as the webhook dispatcher's cursors, sets ``on``)."""
    return await retry_connect(
        lambda: create_pool(
            config.database_url,
            config.read_model_schema,
            min_size=config.db_pool_min,
            max_size=config.db_pool_max,
            stateless=True,
            statement_timeout_s=config.db_statement_timeout_s,
            connect_timeout_s=config.db_connect_timeout_s,
            synchronous_commit=synchronous_commit,
            pooled=config.pooled,
        ),
        failing=failing,
    )


#: How long the projector's tasks wait for one of its pooled connections. Each is held for one
#: batch (or one sweep), whose statements are bounded by the statement timeout; past this the
#: wait is a StorageUnavailable, retried with backoff like an outage.
WRITER_ACQUIRE_TIMEOUT_S = 30.0


#: How long a reading service's background work (the stream's feed and lease renewals) waits
#: for a pooled connection: longer than a partner request (``db_acquire_timeout_s``), so a
#: burst of handshakes delays it rather than failing it, and well inside a lease's lifetime.
BACKGROUND_ACQUIRE_TIMEOUT_S = 3.0


class BoundedReader:
    """Statements on pooled connections, each wait for a connection bounded by ``timeout_s``
    (asyncpg's own ``Pool.fetch``/``execute`` wait without a bound): an exhausted pool is a
    prompt StorageUnavailable (through :func:`storage_errors`), not a stall."""

    __slots__ = ("pool", "timeout_s")

    def __init__(self, pool: asyncpg.Pool, timeout_s: float | None) -> None:
        self.pool, self.timeout_s = pool, timeout_s

    async def fetch(self, query: str, *args: object, timeout: float | None = None) -> list:
        async with self.pool.acquire(timeout=self.timeout_s) as conn:
            return await conn.fetch(query, *args, timeout=timeout)

    async def fetchrow(self, query: str, *args: object, timeout: float | None = None) -> asyncpg.Record | None:
        async with self.pool.acquire(timeout=self.timeout_s) as conn:
            return await conn.fetchrow(query, *args, timeout=timeout)

    async def fetchval(self, query: str, *args: object, timeout: float | None = None) -> object:
        async with self.pool.acquire(timeout=self.timeout_s) as conn:
            return await conn.fetchval(query, *args, timeout=timeout)

    async def execute(self, query: str, *args: object, timeout: float | None = None) -> str:
        async with self.pool.acquire(timeout=self.timeout_s) as conn:
            return await conn.execute(query, *args, timeout=timeout)


async def is_migrated(db: Queryable, schema: str, timeout_s: float | None = None) -> bool:
    """Whether the read-model schema ``schema`` exists and is migrated (its ``positions`` table,
    the first migration's, exists). The one statement of that rule: the readiness checks, the
    stored positions and the rebuild's switch ask it."""
    rows = await db.fetch(
        "SELECT to_regclass($1) IS NOT NULL AS migrated", quote_ident(schema) + ".positions", timeout=timeout_s
    )
    return bool(rows[0]["migrated"])


async def postgres_check(pool: asyncpg.Pool, schema: str, timeout_s: float = 0.8) -> tuple[bool, str]:
    """Readiness: PostgreSQL answers a query within ``timeout_s`` and the read model is migrated."""
    try:
        with storage_errors("readiness"):
            async with pool.acquire(timeout=timeout_s) as conn:
                migrated = await is_migrated(conn, schema, timeout_s)
    except StorageUnavailable as exc:
        return False, f"PostgreSQL unreachable ({exc})"
    except asyncpg.PostgresError as exc:
        return False, f"PostgreSQL error ({type(exc).__name__})"
    return (True, "ok") if migrated else (False, "read model not migrated")


async def open_connection(
    dsn: str,
    *,
    schema: str | None = None,
    read_only: bool = False,
    timeout: float = 10.0,
    settings: dict[str, str] | None = None,
    command_timeout: float | None = None,
) -> asyncpg.Connection:
    """A single connection (the caller closes it); connection failures are raised as they are.

    ``schema`` puts that schema first on the search_path (quoted); ``read_only`` makes every
    transaction read-only; ``settings`` are further server settings (application_name, ...);
    ``command_timeout`` bounds each statement on the client (``TimeoutError``), which holds
    where a server-side bound cannot: a server that does not answer at all.

    ``read_only`` is set once the session is open, not in the start-up packet: the server
    reports a start-up ``default_transaction_read_only=on`` back, and a multi-host URL's
    ``target_session_attrs=read-write`` (docs/operations.md#postgresql-crash-and-failover) would
    then find no host writable, the primary included."""
    server_settings = dict(settings or {})
    if schema is not None:
        server_settings["search_path"] = quote_ident(schema) + ",public"
    conn = await asyncpg.connect(dsn, timeout=timeout, server_settings=server_settings, command_timeout=command_timeout)
    if read_only:
        try:
            await conn.execute("SET default_transaction_read_only = on")
        except BaseException:
            conn.terminate()
            raise
    return conn


#: How long closing a session may take (a frozen server never acknowledges it).
CLOSE_TIMEOUT_S = 5.0


@contextlib.asynccontextmanager
async def connect(
    dsn: str,
    *,
    schema: str | None = None,
    read_only: bool = False,
    timeout: float = 10.0,
    settings: dict[str, str] | None = None,
    what: str = "connect",
    command_timeout: float | None = None,
    retry_within_s: float | None = None,
) -> AsyncIterator[asyncpg.Connection]:
    """:func:`open_connection` for the length of a block, its failure to connect translated
    into :class:`StorageUnavailable` (``what`` names the attempt). ``retry_within_s``: a failure
    to connect is retried by :func:`retry_connect` for that long (None: not retried). Closing it
    waits at most :data:`CLOSE_TIMEOUT_S`, then drops the connection."""

    async def attempt() -> asyncpg.Connection:
        with storage_errors(what):
            return await open_connection(
                dsn,
                schema=schema,
                read_only=read_only,
                timeout=timeout,
                settings=settings,
                command_timeout=command_timeout,
            )

    if retry_within_s is None:
        conn = await attempt()
    else:
        try:
            conn = await retry_connect(attempt, what=what, within_s=retry_within_s)
        except StorageUnavailable as exc:
            raise StorageUnavailable(f"{exc}; gave up after retrying for {retry_within_s:g} s") from exc
    try:
        yield conn
    finally:
        try:
            await conn.close(timeout=CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a server that does not answer: drop the connection
            conn.terminate()
