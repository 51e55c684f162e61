"""A broker that stops answering is said in the log, not only in readiness.

A consumer whose broker is gone raises nothing: aiokafka keeps reconnecting in the background
and every fetch returns empty. Readiness probes the broker when asked; this watch probes it
on its own, so the outage reaches the log too: an ERROR line once it has lasted
``ERROR_AFTER_S`` (then every ``ERROR_EVERY_S``), a WARNING when the broker answers again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..runtime import retry
from ..runtime.config import Config
from ..runtime.supervise import honour_cancellation
from .probe import broker_check

log = logging.getLogger(__name__)

#: How often the watch asks the broker.
EVERY_S = 1.0
#: What a service's Failing calls the outage (readiness then names it while starting).
WHAT = "reach the broker"


async def watch_broker(config: Config, failing: retry.Failing, every_s: float = EVERY_S) -> None:
    """Probe the broker every ``every_s`` for ever; log its outages (see the module)."""
    since: float | None = None
    said_at: float | None = None
    while True:
        honour_cancellation()
        ok, detail = await broker_check(config)
        now = time.monotonic()
        if ok:
            if since is not None:
                log.warning("the broker answers again after %.0f s; reading on from the stored positions", now - since)
                failing.done(WHAT)
            since = said_at = None
        else:
            failing.failed(WHAT, ConnectionError(detail))
            since = now if since is None else since
            if now - since >= retry.ERROR_AFTER_S and (said_at is None or now - said_at >= retry.ERROR_EVERY_S):
                said_at = now
                log.error(
                    "no Kafka broker has answered for %.0f s: %s; waiting, and reading on from the stored "
                    "positions once it is back",
                    now - since,
                    detail,
                )
        await asyncio.sleep(every_s)
