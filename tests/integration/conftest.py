"""Fixtures of the integration tests."""

from __future__ import annotations

import asyncpg
import pytest

from tickerwire.services.readmodel.migrate import migrate


@pytest.fixture
async def conn(fresh_db: str):
    """A connection to a freshly migrated read model (schema ``rm``, first on the search path)."""
    c = await asyncpg.connect(fresh_db)
    await migrate(c, "rm")
    await c.execute("SET search_path TO rm, public")
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def db(fresh_db: str):
    """A connection to an empty database: each example of a property test migrates the read
    models it compares (``tests.support.readmodel.reset``)."""
    c = await asyncpg.connect(fresh_db)
    try:
        yield c
    finally:
        await c.close()
