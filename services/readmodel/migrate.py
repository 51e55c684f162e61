"""Versioned migrations of the database: ``platform`` (public: usage counters, stream leases)
and ``readmodel`` (the read-model schema, normally ``rm``), applied under an advisory lock."""

from __future__ import annotations

import logging
from importlib import resources

import asyncpg

log = logging.getLogger(__name__)


def _migration_files(scope: str) -> list[tuple[str, str]]:
    folder = resources.files(__package__) / "migrations" / scope
    return sorted((p.name, p.read_text(encoding="utf-8")) for p in folder.iterdir() if p.name.endswith(".sql"))


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
            key = scope if scope == "platform" else _scope(schema)
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


def _scope(schema: str) -> str:
    """The bookkeeping scope of a read-model schema's migrations."""
    return f"readmodel:{schema}"


async def forget(conn: asyncpg.Connection, schema: str) -> None:
    """Drop the bookkeeping of ``schema``'s migrations (the schema itself is being dropped)."""
    if await conn.fetchval("SELECT to_regclass('public.tw_migrations') IS NOT NULL"):
        await conn.execute("DELETE FROM public.tw_migrations WHERE scope = $1", _scope(schema))


async def renamed(conn: asyncpg.Connection, old: str, new: str) -> None:
    """Schema ``old`` was renamed ``new`` (replacing it): its bookkeeping follows."""
    await conn.execute("DELETE FROM public.tw_migrations WHERE scope = $1", _scope(new))
    await conn.execute("UPDATE public.tw_migrations SET scope = $1 WHERE scope = $2", _scope(new), _scope(old))
