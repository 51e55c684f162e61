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
