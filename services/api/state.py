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
