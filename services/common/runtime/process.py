"""Running one service as a process: logging, config, signals, a clean exit."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from typing import Awaitable, Callable, NamedTuple, TypeVar

import asyncpg

from .config import Config
from .errors import BrokerUnavailable, ConfigError, StorageUnavailable, TickerwireError
from .logs import setup_logging

log = logging.getLogger(__name__)

C = TypeVar("C", bound=Config)


def cancel_on_signals() -> None:
    """SIGINT and SIGTERM cancel the running task (the process's main task): it stops cleanly."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)


class Failure(NamedTuple):
    """Why a command or a service could not do its job: one line, its exit status (2 a bad
    setting, 1 a dependency that is unreachable or refuses), and whether it is a bug (none of
    those: its traceback is worth keeping)."""

    message: str
    status: int
    bug: bool = False


def failure_line(exc: BaseException) -> Failure:
    """The one rule for every command that is not an admin command (those add their own
    refusals, ``cli.running``) and for a service that cannot run."""
    from aiokafka.errors import KafkaError

    if isinstance(exc, ConfigError):
        return Failure(str(exc), 2)
    if isinstance(exc, StorageUnavailable):
        return Failure(f"PostgreSQL is unreachable ({exc}); start it, or check TICKERWIRE_DATABASE_URL", 1)
    if isinstance(exc, (asyncpg.PostgresError, asyncpg.InterfaceError)):
        return Failure(
            f"PostgreSQL refused: {type(exc).__name__}: {exc} (check TICKERWIRE_DATABASE_URL and the migrations)", 1
        )
    if isinstance(exc, (BrokerUnavailable, KafkaError)):
        return Failure(f"the broker is unreachable ({exc}); start it, or check TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS", 1)
    if isinstance(exc, TickerwireError):
        return Failure(str(exc), 1)
    if isinstance(exc, OSError):
        return Failure(f"{type(exc).__name__}: {exc}", 1)
    return Failure(f"failed: {type(exc).__name__}: {exc}", 1, bug=True)


def command_failed(command: str, exc: BaseException) -> int:
    """What a command does when it fails with ``exc``: one line on stderr (its traceback only
    in the DEBUG log), and the exit status of :func:`failure_line`."""
    log.debug("%s failed", command, exc_info=exc)
    failure = failure_line(exc)
    print(f"tickerwire {command}: {failure.message}", file=sys.stderr)
    return failure.status


def run_service(name: str, main: Callable[[C], Awaitable[None]], config: C) -> int:
    """Run ``main(config)`` until it returns or SIGINT/SIGTERM arrives; returns an exit status."""
    setup_logging(name, config.log_level)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    # Everything imported so far lives as long as the process: move it out of the collector's
    # reach, so a full collection scans only what serving allocates (seen as tail latency).
    gc.collect()
    gc.freeze()

    async def runner() -> None:
        cancel_on_signals()
        try:
            await main(config)
        except asyncio.CancelledError:
            log.info("%s stopping", name)

    try:
        asyncio.run(runner())
    except KeyboardInterrupt:
        pass
    except ConfigError:  # a setting: the command line's one line and status 2 (``cli.main``)
        raise
    except Exception as exc:
        # Refused for good (an unknown database or role, a wrong password, a bad setting): the
        # supervisor's restart, with its backoff, is the retry (transient failures are retried
        # inside). One log record; a bug's traceback goes into it as a field, not onto stderr.
        failure = failure_line(exc)
        log.error("%s cannot run: %s", name, failure.message, exc_info=exc if failure.bug else None)
        return failure.status
    return 0
