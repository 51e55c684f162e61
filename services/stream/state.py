"""Typed keys of what the stream application holds: what :func:`.app.create_app` and its cleanup
contexts put in, and what the ``/stream`` handler (:mod:`.endpoint`) reads."""

from __future__ import annotations

import asyncpg
from aiohttp import web

from ..common.db.replicas import Replicas
from ..readmodel.access import Principals
from ..readmodel.stamps import StampWatcher
from .feed import Feed
from .hub import Hub
from .leases import Leases
from .metrics import StreamMetrics
from .settings import StreamConfig

CONFIG = web.AppKey("config", StreamConfig)
POOL = web.AppKey("pool", asyncpg.Pool)
HUB = web.AppKey("hub", Hub)
FEED = web.AppKey("feed", Feed)
LEASES = web.AppKey("leases", Leases)
METRICS = web.AppKey("metrics", StreamMetrics)
PRINCIPALS = web.AppKey("principals", Principals)
WATCHER = web.AppKey("watcher", StampWatcher)
REPLICAS = web.AppKey("replicas", Replicas)
