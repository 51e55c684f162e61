"""Migrations and their bookkeeping: applied once per schema, forgotten with a dropped schema,
following a schema that is renamed over another (the rebuild's switch)."""

from __future__ import annotations

import asyncpg

from tickerwire.services.readmodel.migrate import forget, migrate, renamed


async def _scopes(conn: asyncpg.Connection) -> dict[str, int]:
    rows = await conn.fetch("SELECT scope, count(*) AS n FROM public.tw_migrations GROUP BY scope")
    return {r["scope"]: r["n"] for r in rows}


async def test_bookkeeping_per_schema_forget_and_rename(fresh_db):
    conn = await asyncpg.connect(fresh_db)
    try:
        first = await migrate(conn, "rm")
        assert first and await migrate(conn, "rm") == []  # applied once
        assert await migrate(conn, "rm_next")  # a second schema has its own bookkeeping
        scopes = await _scopes(conn)
        assert scopes["readmodel:rm"] == scopes["readmodel:rm_next"] > 0 and scopes["platform"] > 0

        await renamed(conn, "rm_next", "rm")
        scopes = await _scopes(conn)
        assert "readmodel:rm_next" not in scopes and scopes["readmodel:rm"] > 0

        await conn.execute("DROP SCHEMA rm CASCADE; DROP SCHEMA IF EXISTS rm_next CASCADE")
        await forget(conn, "rm")
        assert "readmodel:rm" not in await _scopes(conn)
        assert await migrate(conn, "rm") == [name for name in first if name.startswith("readmodel:")]
    finally:
        await conn.close()
