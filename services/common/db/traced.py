"""A reader whose every statement is a CLIENT span (tracing on): what a request's handler reads
shows beneath its SERVER span, one span per statement, named from the statement the way the
database conventions summarise it (``SELECT posts``: the operation and the tables it names)."""

from __future__ import annotations

import functools
import re
from typing import Any, Protocol

import asyncpg

from ..tracing import Kind, Tracing

#: A table a statement reads or writes: after FROM, JOIN, INTO or UPDATE, not a function.
_TABLE = re.compile(
    r"\b(?:FROM|JOIN|INTO|UPDATE)\s+(?!SELECT\b|LATERAL\b)([A-Za-z_][\w.]*\w|[A-Za-z_])\b(?!\s*\()", re.I
)
#: Tables named in a span's name, at most.
MAX_TABLES = 3
_OPERATION = re.compile(r"\s*(?:--[^\n]*\n\s*)*([A-Za-z]+)")


class Reader(Protocol):
    async def fetch(self, query: str, *args: object, timeout: float | None = None) -> list: ...

    async def fetchrow(self, query: str, *args: object, timeout: float | None = None) -> asyncpg.Record | None: ...


@functools.lru_cache(maxsize=512)
def summary(query: str) -> tuple[str, dict[str, Any]]:
    """The span name and attributes of ``query``: its operation and the tables it names, in order
    (``SELECT posts``, ``SELECT positions webhook_endpoints``; at most :data:`MAX_TABLES`).
    Statements are constants: each is summarised once."""
    found = _OPERATION.match(query)
    operation = found.group(1).upper() if found else "QUERY"
    tables = list(dict.fromkeys(m.group(1).rsplit(".", 1)[-1] for m in _TABLE.finditer(query)))[:MAX_TABLES]
    name = " ".join([operation, *tables])
    attributes: dict[str, Any] = {
        "db.system.name": "postgresql",
        "db.operation.name": operation,
        "db.query.summary": name,
        "db.query.text": query.strip(),
    }
    if len(tables) == 1:
        attributes["db.collection.name"] = tables[0]
    return name, attributes


class TracedReader:
    """``reader``'s statements, each under a CLIENT span child of the current span."""

    __slots__ = ("reader", "tracing")

    def __init__(self, reader: Reader, tracing: Tracing) -> None:
        self.reader, self.tracing = reader, tracing

    async def fetch(self, query: str, *args: object, timeout: float | None = None) -> list:
        name, attributes = summary(query)
        with self.tracing.start(name, Kind.CLIENT, attributes=attributes):
            return await self.reader.fetch(query, *args, timeout=timeout)

    async def fetchrow(self, query: str, *args: object, timeout: float | None = None) -> asyncpg.Record | None:
        name, attributes = summary(query)
        with self.tracing.start(name, Kind.CLIENT, attributes=attributes):
            return await self.reader.fetchrow(query, *args, timeout=timeout)
