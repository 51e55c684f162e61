"""An operator command never waits without end on a PostgreSQL that stopped answering: the
server's statement bound cannot fire on a frozen server (a stopped process, a network that
drops packets), so the command's session bounds each statement on the client too, and ends
with its one line (real PostgreSQL behind a forwarder that freezes)."""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support.forward import Forwarder
from tickerwire.services.common.db import CLOSE_TIMEOUT_S
from tickerwire.services.common.db.command import COMMAND_CLIENT_GRACE_S, command_connection
from tickerwire.services.common.runtime.errors import TickerwireError

BOUND_S = 1.0


def through(dsn: str, address: str) -> str:
    parts = urlsplit(dsn)
    credentials = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{credentials}@{address}" if credentials else address))


def target(dsn: str) -> str:
    parts = urlsplit(dsn)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 5432}"


@pytest.mark.parametrize("in_transaction", [False, True], ids=["statement", "transaction"])
async def test_a_command_gives_up_on_a_frozen_server_with_its_one_line(pg_dsn, in_transaction):
    async with Forwarder(target(pg_dsn)) as forwarder:
        await forwarder.open()
        started = None
        with pytest.raises(TickerwireError) as failure:
            async with command_connection(through(pg_dsn, forwarder.address), statement_timeout_s=BOUND_S) as conn:
                assert await conn.fetchval("SELECT 1") == 1  # it answers through the forwarder
                forwarder.freeze()
                started = time.monotonic()
                if in_transaction:
                    async with conn.transaction():
                        await conn.execute("CREATE TEMPORARY TABLE never (x int)")
                else:
                    await conn.fetchval("SELECT 2")
        waited = time.monotonic() - started
        forwarder.thaw()
    assert f"PostgreSQL did not answer within {BOUND_S + COMMAND_CLIENT_GRACE_S:g} s" in str(failure.value)
    # The client bound, then at most the bounded clean-up (a rollback the server cannot
    # acknowledge, the close): never the server's bound, which a frozen server never applies.
    assert BOUND_S + COMMAND_CLIENT_GRACE_S <= waited < BOUND_S + 2 * COMMAND_CLIENT_GRACE_S + CLOSE_TIMEOUT_S + 2
