"""An operator command's session on every database URL the docs describe: a single host, and
several hosts with ``target_session_attrs=read-write`` (docs/operations.md#postgresql-crash-and-failover),
the primary first or not (after a failover the old primary, now a standby or gone, is listed first).

Before: a read-only command session asked for ``default_transaction_read_only=on`` in its
start-up packet, which the server reports back, so asyncpg's ``read-write`` check saw every
host as read-only: ``TargetServerAttributeNotMatched``, on the URL every service runs on."""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from tickerwire.devstack.embedded.ports import free_port
from tickerwire.services.common.db.command import command_connection
from tickerwire.services.common.runtime.errors import StorageUnavailable


def hosts(dsn: str, *addresses: str, query: str = "target_session_attrs=read-write") -> str:
    """``dsn`` naming ``addresses`` (host:port, in order) with ``query``."""
    parts = urlsplit(dsn)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = ",".join(addresses)
    return urlunsplit(parts._replace(netloc=f"{credentials}@{netloc}" if credentials else netloc, query=query))


def address(dsn: str) -> str:
    parts = urlsplit(dsn)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 5432}"


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "read-write"])
@pytest.mark.parametrize("shape", ["single", "single+attrs", "two hosts", "gone host first"])
async def test_a_command_session_opens_on_every_documented_url(pg_dsn, shape, read_only):
    here, gone = address(pg_dsn), f"127.0.0.1:{free_port()}"
    dsn = {
        "single": pg_dsn,
        "single+attrs": hosts(pg_dsn, here),
        "two hosts": hosts(pg_dsn, here, here),
        "gone host first": hosts(pg_dsn, gone, here),
    }[shape]
    async with command_connection(dsn, read_only=read_only) as conn:
        assert await conn.fetchval("SHOW transaction_read_only") == ("on" if read_only else "off")
        assert await conn.fetchval("SELECT pg_is_in_recovery()") is False


async def test_a_command_retries_an_unreachable_database_within_its_bound_then_gives_up():
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/x?target_session_attrs=read-write"
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as failure:
        async with command_connection(dsn, read_only=True, retry_within_s=1.5):
            pass
    waited = time.monotonic() - started
    assert 1.5 <= waited < 5, waited
    assert "gave up after retrying for 1.5 s" in str(failure.value)
