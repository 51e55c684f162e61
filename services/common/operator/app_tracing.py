"""A service process's tracing: built from the environment when its application is created
(a bad ``OTEL_*`` value stops it there, one line), shut down when it stops, after everything
else, so the spans of its last work are exported (within :data:`SHUTDOWN_TIMEOUT_S`)."""

from __future__ import annotations

import asyncio
import os
from typing import AsyncIterator

from aiohttp import web
from prometheus_client import CollectorRegistry

from .. import tracing

TRACING = web.AppKey("tracing", tracing.Tracing)
#: Longest a stopping process waits for its queued spans to be exported.
SHUTDOWN_TIMEOUT_S = 2.0


def install_tracing(app: web.Application, process: str, registry: CollectorRegistry) -> tracing.Tracing:
    """``app[TRACING]``: the handle of ``process`` (``tickerwire-projector``...), counting on
    ``registry``; its shutdown is the application's last clean-up step."""
    handle = tracing.from_env(os.environ, process, registry)
    app[TRACING] = handle

    async def shutdown(_: web.Application) -> AsyncIterator[None]:
        yield
        if handle.enabled:
            await asyncio.to_thread(handle.shutdown, SHUTDOWN_TIMEOUT_S)

    app.cleanup_ctx.insert(0, shutdown)  # clean-up runs in reverse: first in, cleaned up last
    return handle
