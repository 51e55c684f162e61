"""The schema registry a framed record's schema id is looked up in (docs/publishing.md#schema-registry-framing).

A record a schema-registry serializer wrote starts with Confluent's frame: the magic byte 0
and a 4-byte schema id (:func:`tickerwire.schemas.models.registry_schema_id`). With
``TICKERWIRE_PROJECTOR_SCHEMA_REGISTRY_URL`` set, each id is looked up once (``GET /schemas/ids/<id>``,
the REST API of Confluent Schema Registry, Apicurio Registry's compatibility API and
Karapace), each lookup bounded by ``TICKERWIRE_PROJECTOR_SCHEMA_REGISTRY_TIMEOUT_S``; the ids it knows
are kept in a bounded cache. A record naming an id the registry does not know (404) becomes a
dead letter (``unknown_schema_id``); a registry that does not answer is an outage, retried
with backoff like the database, never a reason to skip a record. Without a registry the id is
only recorded (in the reason of any dead letter of the record), and the payload is validated
as usual either way.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import replace

import aiohttp

from tickerwire.schemas.models import registry_schema_id

from ..common.runtime.errors import TransientError
from ..common.runtime.retry import Failing, retry_transient
from .apply import ConsumedRecord

#: The known schema ids kept (an id is 4 bytes; a deployment uses a handful).
CACHE_IDS = 4096
UNKNOWN_SCHEMA_ID = "unknown_schema_id"


class RegistryUnavailable(TransientError):
    """The registry did not answer a lookup (refused, timed out, a 5xx): retried, never skipped."""


class SchemaRegistry:
    """Which schema ids the configured registry knows: one lookup per id, bounded in time and memory."""

    def __init__(self, url: str, timeout_s: float, *, cache_ids: int = CACHE_IDS) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._known: OrderedDict[int, None] = OrderedDict()
        self._cache_ids = cache_ids
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def knows(self, schema_id: int) -> bool:
        """Whether the registry holds ``schema_id`` (an unknown id is asked again next time: it
        may be registered meanwhile), or :class:`RegistryUnavailable`."""
        if schema_id in self._known:
            self._known.move_to_end(schema_id)
            return True
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        where = f"{self.url}/schemas/ids/{schema_id}"
        try:
            async with self._session.get(where, headers={"Accept": "application/json"}) as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise RegistryUnavailable(f"schema registry {self.url}: {type(exc).__name__}: {exc}") from None
        if status == 404:
            return False
        if status != 200:
            raise RegistryUnavailable(f"schema registry {self.url} answered {status} for schema id {schema_id}")
        self._known[schema_id] = None
        if len(self._known) > self._cache_ids:
            self._known.popitem(last=False)
        return True

    async def vet(self, records: list[ConsumedRecord]) -> list[ConsumedRecord]:
        """``records`` with each framed one whose schema id the registry does not know set aside
        as a dead letter (its key and value kept)."""
        out = []
        for rec in records:
            schema_id = registry_schema_id(rec.value) if rec.fault is None else None
            if schema_id is not None and not await self.knows(schema_id):
                reason = (
                    f"schema id {schema_id} of the record's schema-registry frame is not known to the "
                    f"schema registry {self.url}; register the schema, then `tickerwire dead-letters retry`"
                )
                rec = replace(rec, fault=(UNKNOWN_SCHEMA_ID, reason))
            out.append(rec)
        return out

    async def vet_retrying(self, records: list[ConsumedRecord], failing: Failing | None = None) -> list[ConsumedRecord]:
        """:meth:`vet`, retried with backoff while the registry does not answer."""
        return await retry_transient(lambda: self.vet(records), what="schema registry lookup", failing=failing)


def registry_of(url: str, timeout_s: float) -> SchemaRegistry | None:
    """The registry of the settings, or None when none is configured."""
    return SchemaRegistry(url, timeout_s) if url else None
