"""Webhook receivers for tests: real aiohttp servers on 127.0.0.1 that verify every request's
signature (the server's own signer is not used: the check is the Standard Webhooks rule written
out), record it, and answer as a fault plan says: 200, 500, a 429 with ``Retry-After``, a reset
connection, an answer slower than the dispatcher waits, or nothing at all while down."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import orjson
from aiohttp import web

from tickerwire.devstack.embedded.ports import free_ports

#: A fault plan: what to do with the next request (None: answer 200).
Plan = Callable[[], str | None]


@dataclass(frozen=True, slots=True)
class Request:
    webhook_id: str
    timestamp: int
    body: bytes
    #: What the receiver did: "ok" (200), or the fault it answered with.
    answer: str
    #: Monotonic time of arrival.
    received_at: float = 0.0
    #: The ``v1,...`` signatures the request carried.
    signatures: tuple[str, ...] = ()

    @property
    def message(self) -> dict:
        return orjson.loads(self.body)

    @property
    def key(self) -> tuple[int, str]:
        """(post id, lang): the announcement."""
        data = self.message["data"]
        return data["id"], data["lang"]

    @property
    def position(self) -> tuple[int, int, str]:
        """(partition, offset, lang): the announcement's place in cursor order."""
        partition, offset = self.message["log_position"].split(":")
        return int(partition), int(offset), self.message["data"]["lang"]


def expected_signature(secret: bytes, webhook_id: str, timestamp: str, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()


def flaky(seed: int, *, errors: float = 0.08, resets: float = 0.04, limited: int = 4, slow: int = 3) -> Plan:
    """Random 500s and resets, and a few 429s and answers slower than the attempt timeout."""
    rng = random.Random(seed)
    left = {"429": limited, "slow": slow}

    def plan() -> str | None:
        roll = rng.random()
        if roll < errors:
            return "500"
        if roll < errors + resets:
            return "reset"
        if roll < errors + resets + 0.01 and left["429"]:
            left["429"] -= 1
            return "429"
        if roll < errors + resets + 0.02 and left["slow"]:
            left["slow"] -= 1
            return "slow"
        return None

    return plan


@dataclass(eq=False)
class Receiver:
    secret: bytes
    plan: Plan = lambda: None
    #: Seconds a "slow" answer takes (longer than the dispatcher's attempt timeout).
    slow_s: float = 3.0
    #: The ``Retry-After`` of a "429".
    retry_after: str = "1"
    port: int = field(default_factory=lambda: free_ports(1)[0])
    requests: list[Request] = field(default_factory=list)
    bad_signatures: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def acked(self) -> list[Request]:
        return [r for r in self.requests if r.answer == "ok"]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        wid, ts = request.headers["webhook-id"], request.headers["webhook-timestamp"]
        mine = expected_signature(self.secret, wid, ts, body)
        signatures = tuple(request.headers.get("webhook-signature", "").split(" "))
        if mine not in signatures:
            self.bad_signatures += 1
            return web.Response(status=400, text="bad signature")
        fault = self.plan()
        self.requests.append(Request(wid, int(ts), body, fault or "ok", time.monotonic(), signatures))
        if fault == "500":
            return web.Response(status=500, text="flaky")
        if fault == "429":
            return web.Response(status=429, headers={"Retry-After": self.retry_after})
        if fault == "410":
            return web.Response(status=410, text="gone")
        if fault == "reset":
            assert request.transport is not None
            request.transport.abort()
            return web.Response(status=500)
        if fault == "slow":
            await asyncio.sleep(self.slow_s)
        return web.Response(status=200 if fault is None else 500, text="ok")

    async def start(self) -> "Receiver":
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
