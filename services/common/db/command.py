"""An operator command's PostgreSQL session (``tickerwire migrate``, ``projector accept-log``,
the admin commands): bounded on the server and in the client, connected as the services connect
(:func:`~tickerwire.services.common.db.retry_connect`, within :data:`COMMAND_CONNECT_WITHIN_S`),
and every bound that gives up is the command's one line."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

import asyncpg

from ..runtime.errors import TickerwireError
from . import connect

#: An operator command's session (``tickerwire migrate``, ``projector accept-log``, the admin
#: commands): how long one statement may run, and how long it may wait for a lock. A migration
#: queued behind a long transaction would otherwise wait without end, and every reader of the
#: table would queue behind the migration; it gives up instead, having changed nothing.
COMMAND_STATEMENT_TIMEOUT_S = 60.0
COMMAND_LOCK_TIMEOUT_S = 10.0
#: How much longer than the server's statement bound the command itself waits for an answer:
#: a server that is frozen, or cut off by the network, never applies its own bound.
COMMAND_CLIENT_GRACE_S = 5.0
#: A migration's statements may build indexes over a large read model.
MIGRATION_STATEMENT_TIMEOUT_S = 3600.0
#: How long a command retries connecting (PostgreSQL restarting, a failover promoting a standby)
#: before it gives up with its one line.
COMMAND_CONNECT_WITHIN_S = 15.0


@contextlib.asynccontextmanager
async def command_connection(
    dsn: str,
    *,
    schema: str | None = None,
    read_only: bool = False,
    statement_timeout_s: float = COMMAND_STATEMENT_TIMEOUT_S,
    what: str = "connect",
    retry_within_s: float = COMMAND_CONNECT_WITHIN_S,
) -> AsyncIterator[asyncpg.Connection]:
    """:func:`connect` for an operator command: its statements bounded by ``statement_timeout_s``
    and its lock waits by :data:`COMMAND_LOCK_TIMEOUT_S` on the server; a bound that gives up
    is a :class:`TickerwireError` whose message is the command's one line. Connecting is
    retried as a service retries it (:func:`~tickerwire.services.common.db.retry_connect`), for ``retry_within_s``."""
    settings = {
        "statement_timeout": str(int(statement_timeout_s * 1000)),
        "lock_timeout": str(int(COMMAND_LOCK_TIMEOUT_S * 1000)),
    }
    waited = statement_timeout_s + COMMAND_CLIENT_GRACE_S
    try:
        async with connect(
            dsn,
            schema=schema,
            read_only=read_only,
            settings=settings,
            what=what,
            command_timeout=waited,
            retry_within_s=retry_within_s,
        ) as conn:
            yield conn
    except asyncpg.exceptions.LockNotAvailableError:
        raise TickerwireError(
            f"gave up after waiting {COMMAND_LOCK_TIMEOUT_S:g} s for a lock another PostgreSQL session "
            "holds (a long transaction, a projector batch or a rebuild switching); nothing was changed: "
            "run it again"
        ) from None
    except asyncpg.exceptions.QueryCanceledError as exc:
        raise TickerwireError(f"a statement ran past its bound ({exc}); nothing was changed") from None
    except TimeoutError:
        raise TickerwireError(
            f"PostgreSQL did not answer within {waited:g} s (frozen, overloaded or cut off?); "
            "a change in flight may or may not have been committed: run the command again "
            "once PostgreSQL answers (each command is safe to repeat)"
        ) from None
