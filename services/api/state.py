"""Typed keys of what the API application holds."""

from __future__ import annotations

import asyncpg
from aiohttp import web

from ..common.db import BoundedReader
from ..common.db.replicas import ReplicaReader, Replicas
from ..common.db.traced import TracedReader
from ..common.operator.app_tracing import TRACING
from ..readmodel.access import Principals
from ..readmodel.logposition import LogPosition
from ..readmodel.stamps import StampWatcher
from .admission import Admissions
from .catalog import Catalog
from .compression import Compressed
from .metrics import ApiMetrics
from .pages import PageCache
from .params import Listings
from .publisher import Publisher
from .settings import ApiConfig

CONFIG = web.AppKey("config", ApiConfig)
POOL = web.AppKey("pool", asyncpg.Pool)
CATALOG = web.AppKey("catalog", Catalog)
METRICS = web.AppKey("metrics", ApiMetrics)
PRINCIPALS = web.AppKey("principals", Principals)
ADMISSIONS = web.AppKey("admissions", Admissions)
WATCHER = web.AppKey("watcher", StampWatcher)
REPLICAS = web.AppKey("replicas", Replicas)
COMPRESSED = web.AppKey("compressed", Compressed)
PAGES = web.AppKey("pages", PageCache)
LISTINGS = web.AppKey("listings", Listings)
SEARCHES = web.AppKey("searches", Listings)
PUBLISHER = web.AppKey("publisher", Publisher)


#: The client's X-Min-Log-Position, parsed: the request is answered from data at least this fresh.
MIN_LOG_POSITION = web.RequestKey("min_log_position", LogPosition)


def db(request: web.Request, at_least: LogPosition | None = None) -> BoundedReader | ReplicaReader | TracedReader:
    """Where a handler runs its one statement (the gates and limits need no connection of their
    own), the wait for a connection bounded by ``db_acquire_timeout_s``: an exhausted pool is a
    prompt 503, not a stall. With replicas configured, a replica in rotation (fresh enough for
    the client's X-Min-Log-Position and for ``at_least``), falling back to the primary. With
    tracing on, each statement is a CLIENT span beneath the request's."""
    app = request.app
    primary = BoundedReader(app[POOL], app[CONFIG].db_acquire_timeout_s)
    tracing = app[TRACING]
    if not app[REPLICAS]:
        return TracedReader(primary, tracing) if tracing.enabled else primary
    want = (request.get(MIN_LOG_POSITION) or LogPosition()).marks()
    for partition, offset in (at_least or LogPosition()).pairs:
        want[partition] = max(offset, want.get(partition, 0))
    reader = ReplicaReader(app[REPLICAS], primary, want or None)
    return TracedReader(reader, tracing) if tracing.enabled else reader


#: The consistency mark of the data a handler served (the X-Log-Position header), when the
#: handler read it in the same statement as that data; otherwise the catalog's mark applies.
REQUEST_LOG_POSITION = web.RequestKey("log_position", LogPosition)


def log_position(request: web.Request) -> LogPosition:
    """The X-Log-Position of this request's response: the handler's own mark, else the mark the
    catalog was last verified current at (read before this request began, so never ahead)."""
    mark = request.get(REQUEST_LOG_POSITION)
    return mark if mark is not None else request.app[CATALOG].log_position
