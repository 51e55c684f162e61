"""The dispatcher's reads and writes of PostgreSQL (:mod:`.sql`), each bounded by the pool's
acquire and statement bounds, connection failures raised as :class:`..common.runtime.errors.StorageUnavailable`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import asyncpg

from ..common.db import BACKGROUND_ACQUIRE_TIMEOUT_S, BoundedReader, begin_local, storage_errors
from . import sql
from .endpoint_record import Endpoint
from .schedule import AttemptResult


class LeaseLost(Exception):
    """This process no longer holds the endpoint's lease: another dispatcher delivers to it."""


@dataclass(frozen=True, slots=True)
class DeliveryProgress:
    """An endpoint's stored progress, as taken with its lease."""

    endpoint_id: str
    cursor: str | None
    replay_seq: int
    disabled: bool
    disabled_version: int | None
    #: Failed attempts of the message at the head (0: none).
    attempt: int
    failing_for_s: float | None
    retry_in_s: float


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt to record: the message's ``webhook-id`` and its attempt number."""

    webhook_id: str
    number: int
    at: datetime
    result: AttemptResult
    next_attempt_at: datetime | None = None
    #: The message's ``type``: post.created or webhook.test.
    type: str = "post.created"


class Store:
    def __init__(self, pool: asyncpg.Pool, owner: str, lease_ttl_s: float) -> None:
        self._pool = pool
        #: Every read and single statement waits at most this long for a pooled connection.
        self.pool = BoundedReader(pool, BACKGROUND_ACQUIRE_TIMEOUT_S)
        self.owner = owner
        self.lease_ttl_s = lease_ttl_s

    async def endpoints(self) -> list[tuple[Endpoint, bool, str | None]]:
        """Every endpoint not removed, with whether a live lease holds it and by whom."""
        with storage_errors("read webhook endpoints"):
            rows = await self.pool.fetch(sql.SELECT_ENDPOINTS)
        return [(Endpoint.of(r), r["leased"], r["lease_owner"]) for r in rows]

    async def claim(self, ids: list[str]) -> list[DeliveryProgress]:
        with storage_errors("claim webhook endpoints"):
            rows = await self.pool.fetch(sql.CLAIM, self.owner, ids, self.lease_ttl_s)
        return [
            DeliveryProgress(
                r["endpoint_id"],
                r["cursor"],
                r["replay_seq"],
                r["state"] == "disabled",
                r["disabled_version"],
                r["attempt"],
                None if r["failing_for_s"] is None else float(r["failing_for_s"]),
                float(r["retry_in_s"] or 0.0),
            )
            for r in rows
        ]

    async def renew(self, ids: list[str]) -> set[str]:
        """Renew the leases of ``ids``; the ones still held."""
        with storage_errors("renew webhook leases"):
            rows = await self.pool.fetch(sql.RENEW, self.owner, ids, self.lease_ttl_s)
        return {r["endpoint_id"] for r in rows}

    async def release(self, ids: list[str]) -> None:
        with storage_errors("release webhook leases"):
            await self.pool.execute(sql.RELEASE, self.owner, ids)

    async def _guarded(self, what: str, statement: str, *args: object, attempt: Attempt | None = None) -> object:
        """Run a lease-guarded write (with the attempt's row, in one transaction); :class:`LeaseLost` when not held."""
        with storage_errors(what):
            async with self._pool.acquire(timeout=BACKGROUND_ACQUIRE_TIMEOUT_S) as conn, conn.transaction():
                await begin_local(conn)  # through a pooler: synchronous_commit on, for this transaction
                result = await conn.fetch(statement, *args) if "RETURNING" in statement else None
                if result is None:
                    status = await conn.execute(statement, *args)
                    if status.endswith(" 0"):
                        raise LeaseLost(args[0])
                elif not result:
                    raise LeaseLost(args[0])
                if attempt is not None:
                    r = attempt.result
                    await conn.execute(
                        sql.INSERT_ATTEMPT,
                        args[0],
                        attempt.webhook_id,
                        attempt.number,
                        attempt.at,
                        r.outcome,
                        r.status,
                        round(r.latency_s * 1000, 3),
                        r.error,
                        attempt.next_attempt_at,
                        attempt.type,
                        r.excerpt,
                    )
                return result[0] if result else None

    async def delivered(self, endpoint_id: str, cursor: str, attempt: Attempt) -> None:
        """The acknowledged cursor and its attempt, in one transaction."""
        await self._guarded("store a delivery", sql.DELIVERED, endpoint_id, self.owner, cursor, attempt=attempt)

    async def failed(self, endpoint_id: str, attempt: Attempt, retry_in_s: float) -> float:
        """A failed attempt; returns how long the endpoint has been failing, in seconds."""
        row = await self._guarded(
            "store a failed attempt",
            sql.FAILED,
            endpoint_id,
            self.owner,
            attempt.number,
            retry_in_s,
            attempt.webhook_id,
            attempt=attempt,
        )
        assert isinstance(row, asyncpg.Record)
        return float(row["failing_for_s"])

    async def disable(self, endpoint_id: str, version: int, reason: str, attempt: Attempt | None = None) -> None:
        await self._guarded(
            "disable an endpoint", sql.DISABLE, endpoint_id, self.owner, reason, version, attempt=attempt
        )

    async def enable(self, endpoint_id: str) -> None:
        await self._guarded("enable an endpoint", sql.ENABLE, endpoint_id, self.owner)

    async def replay(self, endpoint_id: str, cursor: str, replay_seq: int) -> None:
        await self._guarded("start a replay", sql.REPLAY, endpoint_id, self.owner, cursor, replay_seq)

    async def message_body(self, endpoint_id: str, webhook_id: str, body: bytes) -> bytes:
        """The body every attempt of ``webhook_id`` sends to the endpoint (docs/webhooks.md#one-id-one-body):
        the one stored at its first attempt, or ``body``, stored now (committed durably before it
        is sent, so a dispatcher that stops after sending it is followed by the same bytes)."""
        with storage_errors("store a message's body"):
            async with self._pool.acquire(timeout=BACKGROUND_ACQUIRE_TIMEOUT_S) as conn, conn.transaction():
                await begin_local(conn)
                stored = await conn.fetchval(sql.MESSAGE_BODY, endpoint_id, webhook_id, body)
        assert isinstance(stored, bytes)
        return stored

    async def prune_messages(self, retention_s: float) -> int:
        """Forget bodies older than the retention (a batch), and test events sent before it; how
        many bodies were forgotten."""
        with storage_errors("prune webhook messages"):
            status = await self.pool.execute(sql.PRUNE_MESSAGES, retention_s, sql.PRUNE_MESSAGES_BATCH)
            await self.pool.execute(sql.PRUNE_TESTS, retention_s)
        return int(status.split()[-1])

    async def pending_tests(self, ids: list[str]) -> dict[str, list[int]]:
        """The numbers of the test events waiting for these endpoints, oldest first."""
        with storage_errors("read pending test events"):
            rows = await self.pool.fetch(sql.PENDING_TESTS, ids)
        pending: dict[str, list[int]] = {}
        for r in rows:
            pending.setdefault(r["endpoint_id"], []).append(r["n"])
        return pending

    async def test_sent(self, endpoint_id: str, n: int, attempt: Attempt) -> None:
        """A test event's one attempt, and the test marked sent, in one transaction."""
        await self._guarded("store a test event's attempt", sql.TEST_SENT, endpoint_id, self.owner, n, attempt=attempt)

    async def prune(self, endpoint_id: str) -> None:
        with storage_errors("prune webhook attempts"):
            await self.pool.execute(sql.PRUNE_ATTEMPTS, endpoint_id)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
