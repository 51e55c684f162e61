"""A PostgreSQL failover of ``tickerwire up --replicas N``, on ``tickerwire failover`` (SIGUSR1 to
``up``): the primary is killed (SIGKILL: a crash, not a clean stop), replica 1 is promoted, and
the old primary and every other replica are copied anew from the new primary as its standbys,
each on its own port. The services were given every server in one URL with
``target_session_attrs=read-write`` (:func:`writable_url`): they follow the new primary by
themselves, without a restart (docs/operations.md#postgresql-crash-and-failover)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import orjson

from ...common.runtime.config import STATE_DIR_DEFAULT, setting
from ..running import fail
from .embedded import Embedded
from .output import say

if TYPE_CHECKING:  # imported lazily, by `up` only
    from tickerwire.devstack.embedded.postgres import EmbeddedPostgres


def writable_url(primary_dsn: str, servers: list[EmbeddedPostgres]) -> str:
    """``primary_dsn`` naming every server (the primary's host and port first), for connections
    that keep whichever of them accepts writes."""
    parts = urlsplit(primary_dsn)
    userinfo = parts.netloc.rpartition("@")[0]
    hosts = ",".join(f"{urlsplit(s.dsn).hostname}:{s.port}" for s in servers)
    query = "&".join(filter(None, [parts.query, "target_session_attrs=read-write"]))
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{hosts}" if userinfo else hosts, query=query))


async def fail_over(parts: Embedded, embedded: list) -> None:
    """Kill the primary, promote replica 1, copy the others anew from it; ``parts`` and the
    stack's ``embedded`` list name the servers in their new roles."""
    old, new = parts.postgres, parts.replicas[0]
    assert old is not None and old.pid is not None
    started = time.monotonic()
    say(f"failover: killing the PostgreSQL primary (port {old.port}, pid {old.pid}) with SIGKILL")
    os.kill(old.pid, signal.SIGKILL)
    await asyncio.to_thread(old.stop)  # reaps it
    await asyncio.to_thread(new.promote)
    say(f"failover: replica 1 (port {new.port}) promoted in {time.monotonic() - started:.1f}s; it is the primary")
    standbys = []
    for server in [old, *parts.replicas[1:]]:
        await asyncio.to_thread(server.stop)
        standby = server.standby_of(new.dsn, settings=server.settings)
        await asyncio.to_thread(standby.start)
        standbys.append(standby)
        embedded[embedded.index(server)] = standby
    parts.postgres, parts.replicas = new, standbys
    say(
        f"failover: done in {time.monotonic() - started:.1f}s; the old primary is a standby of the new one "
        f"(port {old.port}); the services follow the new primary by themselves"
    )


#: How long ``tickerwire failover`` waits for ``up`` to say the failover is done.
REQUEST_TIMEOUT_S = 180.0


def request_failover(state_dir: Path, timeout_s: float = REQUEST_TIMEOUT_S) -> str:
    """Ask the ``up`` of ``state_dir`` to fail over (SIGUSR1) and wait until it wrote the outcome
    into ``up.json``; what happened, in one line. ``RuntimeError`` (one line) when it cannot."""
    state_file = state_dir / "up.json"
    info = _state(state_file)
    if info is None:
        raise RuntimeError(f"no `tickerwire up` is running with the state directory {state_dir} (no {state_file})")
    if not info.get("database_read_urls"):
        raise RuntimeError("the running `tickerwire up` has no replica to promote: start it with --replicas 1 or more")
    before, asked = info.get("postgres_primary_port"), time.time()
    try:
        os.kill(int(info["pids"]["up"]), signal.SIGUSR1)
    except (KeyError, TypeError, ValueError, ProcessLookupError, PermissionError) as exc:
        raise RuntimeError(f"cannot signal the running `tickerwire up`: {exc}") from None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        outcome = ((_state(state_file) or {}).get("failover")) or {}
        if outcome.get("at", 0) < asked:
            continue
        if "error" in outcome:
            raise RuntimeError(f"the failover failed: {outcome['error']}")
        return (
            f"PostgreSQL failed over: the primary is now port {outcome['primary_port']} (it was {before}); "
            "the old primary is its standby, and the services follow the new primary by themselves"
        )
    raise RuntimeError(f"`tickerwire up` did not finish the failover within {timeout_s:.0f} s: see its output")


def _state(state_file: Path) -> dict | None:
    try:
        found = orjson.loads(state_file.read_bytes())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def cmd_failover(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir or setting("STATE_DIR", STATE_DIR_DEFAULT) or STATE_DIR_DEFAULT)
    try:
        print(request_failover(state_dir))
    except RuntimeError as exc:
        return fail("failover", str(exc), 1)
    return 0


def register(sub) -> None:
    fo = sub.add_parser(
        "failover",
        help="PostgreSQL failover of a running `tickerwire up --replicas N`: kill the primary, promote replica 1",
    )
    fo.add_argument(
        "--state-dir", help=f"the `up`'s state directory (default TICKERWIRE_STATE_DIR or {STATE_DIR_DEFAULT})"
    )
    fo.set_defaults(func=cmd_failover)
