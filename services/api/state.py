"""Typed keys of what the API application holds."""

from __future__ import annotations

import asyncpg
from aiohttp import web

from ..common.config import Config
from .catalog import Catalog
from .metrics import ApiMetrics

CONFIG = web.AppKey("config", Config)
POOL = web.AppKey("pool", asyncpg.Pool)
CATALOG = web.AppKey("catalog", Catalog)
METRICS = web.AppKey("metrics", ApiMetrics)

#: The request's database connection: acquired once by the access middleware and used by the
#: handler too, so a request costs one pool checkout (two statements) instead of two.
REQUEST_DB = "db"


def db(request: web.Request) -> asyncpg.Connection | asyncpg.Pool:
    """The connection this request already holds, else the pool (routes outside the gates)."""
    return request.get(REQUEST_DB) or request.app[POOL]

#: The consistency mark of the data a handler served (the X-Log-Position header), when the
#: handler read it in the same statement as that data; otherwise the catalog's mark applies.
REQUEST_LOG_POSITION = "log_position"


def log_position(request: web.Request) -> str:
    """The X-Log-Position of this request's response: the handler's own mark, else the mark the
    catalog was last verified current at (read before this request began, so never ahead)."""
    mark = request.get(REQUEST_LOG_POSITION)
    return mark if mark is not None else request.app[CATALOG].log_position
