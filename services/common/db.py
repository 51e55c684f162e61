"""PostgreSQL access shared by the services: pools, versioned migrations, error translation."""

from __future__ import annotations

import contextlib
import logging
from importlib import resources
from typing import AsyncIterator

import asyncpg

from .config import Config
from .errors import StorageUnavailable
from .retry import retry_transient

log = logging.getLogger(__name__)

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


@contextlib.contextmanager
def storage_errors(what: str):
    """Translate connection-level database failures into :class:`StorageUnavailable`."""
    try:
        yield
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
) -> asyncpg.Pool:
    """A pool whose connections resolve unqualified names in the read-model schema first.

    ``stateless`` pools belong to processes that never SET, LISTEN or take session locks;
    their connections skip asyncpg's reset statement when returned to the pool.
    ``statement_timeout_s`` bounds every statement twice: on the server (``statement_timeout``)
    and in the client (``command_timeout``, which also holds when the server is frozen)."""
    with storage_errors("connect"):
        return await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            reset=_keep_session if stateless else None,
            server_settings={
                "search_path": f"{schema},public",
                "application_name": "tickerwire",
                "statement_timeout": str(int(statement_timeout_s * 1000)),
            },
            command_timeout=statement_timeout_s,
            timeout=connect_timeout_s,
        )


async def reader_pool(config: Config) -> asyncpg.Pool:
    """The pool of a reading service (API, stream), connecting with retries until PostgreSQL answers.

    Its statements are bounded by ``db_statement_timeout_s`` and its connection attempts by
    ``db_connect_timeout_s``, so a frozen database turns into a prompt 503, not a stall."""
    return await retry_transient(
        lambda: create_pool(
            config.database_url,
            config.read_model_schema,
            min_size=config.db_pool_min,
            max_size=config.db_pool_max,
            stateless=True,
            statement_timeout_s=config.db_statement_timeout_s,
            connect_timeout_s=config.db_connect_timeout_s,
        ),
        what="connect to PostgreSQL",
        cap=2.0,
    )


async def postgres_check(pool: asyncpg.Pool, schema: str, timeout_s: float = 0.8) -> tuple[bool, str]:
    """Readiness: PostgreSQL answers a query within ``timeout_s`` and the read model is migrated."""
    try:
        with storage_errors("readiness"):
            async with pool.acquire(timeout=timeout_s) as conn:
                migrated = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{schema}.positions", timeout=timeout_s)
    except StorageUnavailable as exc:
        return False, f"PostgreSQL unreachable ({exc})"
    except asyncpg.PostgresError as exc:
        return False, f"PostgreSQL error ({type(exc).__name__})"
    return (True, "ok") if migrated else (False, "read model not migrated")


def _migration_files(scope: str) -> list[tuple[str, str]]:
    folder = resources.files("tickerwire.services.common") / "migrations" / scope
    files = sorted((p.name, p.read_text(encoding="utf-8")) for p in folder.iterdir() if p.name.endswith(".sql"))
    return files


_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS public.tw_migrations (
    scope       text        NOT NULL,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
)
"""
#: Any constant works; it only serializes concurrent migrators.
MIGRATION_LOCK = 0x7477_6D69


async def migrate(conn: asyncpg.Connection, schema: str = "rm") -> list[str]:
    """Apply pending migrations: ``platform`` into public, ``readmodel`` into ``schema``.

    Safe to call from several processes at once (an advisory lock serializes them).
    Returns the names applied by this call.
    """
    if not schema.isidentifier():
        raise ValueError(f"bad schema name {schema!r}")
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute(_BOOKKEEPING)
        for scope, target in (("platform", "public"), ("readmodel", schema)):
            key = scope if scope == "platform" else f"readmodel:{schema}"
            done = {r["name"] for r in await conn.fetch("SELECT name FROM public.tw_migrations WHERE scope = $1", key)}
            if target != "public":
                await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{target}"')
            for name, sql in _migration_files(scope):
                if name in done:
                    continue
                await conn.execute(f'SET LOCAL search_path TO "{target}", public')
                await conn.execute(sql)
                await conn.execute("INSERT INTO public.tw_migrations (scope, name) VALUES ($1, $2)", key, name)
                applied.append(f"{key}/{name}")
        await conn.execute("RESET search_path")
    for name in applied:
        log.info("applied migration %s", name)
    return applied


@contextlib.asynccontextmanager
async def connect(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    with storage_errors("connect"):
        conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()
