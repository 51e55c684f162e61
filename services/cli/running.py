"""What every admin command shares: its settings (the environment, else a running ``tickerwire
up``'s state file), its read-model session, publishing one event, and its one-line failure."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

from ..common.runtime.config import STATE_DIR_DEFAULT, ConfigError, setting
from ..common.runtime.logs import setup_logging
from .settings import FullConfig


def cli_config() -> FullConfig:
    """Every service's settings from the environment (:mod:`.settings`); falls back to a running ``tickerwire up``'s state file."""
    env = dict(os.environ)
    state = Path(setting("STATE_DIR", STATE_DIR_DEFAULT, env) or STATE_DIR_DEFAULT) / "up.json"
    if state.exists():
        import orjson

        try:
            info = orjson.loads(state.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read {state}: {exc}; remove it if no `tickerwire up` is running") from None
        for var, key, default in (
            ("TICKERWIRE_DATABASE_URL", "database_url", ""),
            ("TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS", "kafka_bootstrap_servers", ""),
            ("TICKERWIRE_TOPIC_PREFIX", "topic_prefix", "tickerwire"),
        ):
            if var not in env and var + "_FILE" not in env:
                env[var] = info.get(key, default)
        # `up`'s dispatcher: its signing key (a file, like any secret) and its address policy.
        if info.get("webhooks_signing_key_file") and not any(
            v in env for v in ("TICKERWIRE_WEBHOOKS_SIGNING_KEY", "TICKERWIRE_WEBHOOKS_SIGNING_KEY_FILE")
        ):
            env["TICKERWIRE_WEBHOOKS_SIGNING_KEY_FILE"] = info["webhooks_signing_key_file"]
        if info.get("webhooks_open_targets"):
            env.setdefault("TICKERWIRE_WEBHOOKS_OPEN_TARGETS", info["webhooks_open_targets"])
    return FullConfig.from_env(env)


def fail(command: str, message: str, status: int) -> int:
    print(f"tickerwire {command}: {message}", file=sys.stderr)
    return status


def run_admin(command: str, coro) -> int:
    """Run an admin command; every failure is one line on stderr and a status: 2 for a bad
    argument or setting, 1 for a refusal or an unreachable dependency. Never a traceback."""
    import pydantic

    from ..common import kafka
    from ..common.runtime.process import command_failed
    from .admin import AdminError, BadArgument

    try:
        setup_logging("cli", setting("LOG_LEVEL", "WARNING") or "WARNING")
    except ConfigError as exc:
        coro.close()
        return fail(command, str(exc), 2)
    kafka.quiet_client_logs()
    try:
        result = asyncio.run(coro)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"]) or "value"
        return fail(command, f"invalid {where} {err.get('input')!r}: {err['msg']} (see tickerwire {command} --help)", 2)
    except BadArgument as exc:
        return fail(command, str(exc), 2)
    except AdminError as exc:
        return fail(command, str(exc), 1)
    except Exception as exc:  # a setting, a dependency, or the last resort: still one line
        return command_failed(command, exc)
    return result if isinstance(result, int) else 0


@contextlib.asynccontextmanager
async def read_conn(config: FullConfig, *, read_only: bool = True):
    """A connection to the read model: read-only for admin commands, which never write it
    (only the sweep, the projector's own sweeper run once, writes badge statuses, and
    ``webhooks register`` its reservation, platform state: ``services/readmodel/endpoint_cap.py``). Connecting
    is retried as the services retry it, within a bound (``command_connection``)."""
    from ..common.db import storage_errors
    from ..common.db.command import command_connection

    async with command_connection(
        config.direct_url,
        schema=config.read_model_schema,
        read_only=read_only,
        what=f"connect to {database_hosts(config.direct_url)}",
    ) as conn:
        with storage_errors("query the read model"):
            yield conn


def database_hosts(dsn: str) -> str:
    """host:port of a DSN (each of a multi-host one, in order), without credentials."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(dsn)
        hosts = parts.netloc.rpartition("@")[2]
        if "," in hosts:
            return hosts
        return f"{parts.hostname}:{parts.port or 5432}"
    except ValueError:
        return "the configured database"


async def publish_one(config: FullConfig, event) -> None:
    from .publish import publish_declared

    await publish_declared(config, [event])
