"""Webhook receivers for tests: real aiohttp servers on 127.0.0.1 that verify every request's
signature (the server's own signer is not used: the check is the Standard Webhooks rule written
out), record it, and answer as a fault plan says: 200, 500, a 429 with ``Retry-After``, a reset
connection, an answer slower than the dispatcher waits, or nothing at all while down.

The rules a receiver's requests must keep, in arrival order, written once for every test that
has receivers (:func:`backward`, :func:`conflicting`, :func:`doubled_ids`), with the
asserting forms :func:`check_order` and :func:`check_redeliveries`."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import orjson
from aiohttp import web

from tests.support.stack import ServiceStack
from tickerwire.devstack.embedded.ports import free_ports
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common.db import connect
from tickerwire.services.readmodel.taxonomy import served_locales
from tickerwire.services.readmodel.walk import Page, walk

#: A fault plan: what to do with the next request (None: answer 200).
Plan = Callable[[], str | None]
#: The answer recorded for a request whose signature did not verify (it is answered 400).
BAD_SIGNATURE = "bad signature"


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
    #: Its W3C ``traceparent`` header ("" when it had none).
    traceparent: str = ""

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
    #: Called with every request as it arrives, one whose signature failed too (answer
    #: :data:`BAD_SIGNATURE`, not in ``requests``).
    seen: Callable[[Request], None] = lambda request: None
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
            self.seen(Request(wid, int(ts), body, BAD_SIGNATURE))
            return web.Response(status=400, text="bad signature")
        fault = self.plan()
        traceparent = request.headers.get("traceparent", "")
        self.requests.append(Request(wid, int(ts), body, fault or "ok", time.monotonic(), signatures, traceparent))
        self.seen(self.requests[-1])
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


async def start_cursor(stack: ServiceStack) -> str:
    """The read model's frontier cursor now: a new endpoint's ``start_cursor`` (what
    `tickerwire webhooks register` gives it), so it gets every post announced after."""
    async with connect(stack.database_url, schema="rm") as conn:
        page = await walk(conn, topic_name(stack.topic_prefix, POSTS), None, await served_locales(conn), limit=0)
    assert isinstance(page, Page)
    return page.cursor()


def backward(requests: Iterable[Request]) -> list[str]:
    """Each request, in arrival order, whose position is below the one before it on its
    partition (each step back once): positions per partition never go back (a message retried or redelivered repeats its
    position; nothing older comes after a newer one)."""
    found = []
    last: dict[int, tuple[int, str]] = {}
    for r in requests:
        partition, offset, lang = r.position
        if (offset, lang) < last.get(partition, (-1, "")):
            found.append(f"{r.webhook_id} arrived after {last[partition]} on partition {partition}")
        last[partition] = (offset, lang)
    return found


def conflicting(requests: Iterable[Request]) -> list[str]:
    """Each request whose ``webhook-id`` came before with other bytes: one id names one body,
    byte for byte, on every attempt, redelivery and replay (docs/webhooks.md#one-id-one-body).
    Each as "<webhook-id>: what changed"."""
    first: dict[str, Request] = {}
    found = []
    for r in requests:
        earlier = first.setdefault(r.webhook_id, r)
        if earlier.body != r.body:
            changed = {k: (v, r.message.get(k)) for k, v in earlier.message.items() if r.message.get(k) != v}
            found.append(f"{r.webhook_id}: {sorted(changed)} changed")
    return found


def doubled_ids(requests: Iterable[Request]) -> dict[tuple[int, str], set[str]]:
    """The announcements received under more than one ``webhook-id``, with those ids: a message
    sent twice other than as a redelivery of the same id."""
    ids: dict[tuple[int, str], set[str]] = {}
    for r in requests:
        ids.setdefault(r.key, set()).add(r.webhook_id)
    return {k: v for k, v in ids.items() if len(v) > 1}


def check_order(requests: list[Request]) -> None:
    """:func:`backward` finds nothing."""
    assert not (found := backward(requests)), f"{len(found)} out of order, the first: {found[0]}"


def check_redeliveries(requests: list[Request]) -> None:
    """:func:`conflicting` and :func:`doubled_ids` find nothing."""
    assert not (found := conflicting(requests)), f"{len(found)} redeliveries of another message: {found[:5]}"
    assert not (twice := doubled_ids(requests)), f"{len(twice)} announcements under two ids: {list(twice.items())[:5]}"
