"""One endpoint's deliveries (docs/webhooks.md#order): its announcements walked from its cursor
(:func:`..readmodel.walk.walk`, the walk ``GET /changes`` and a stream resume share), each
POSTed until the endpoint acknowledges it (a 2xx) or the endpoint is disabled, one request in
flight, in the walk's order (each partition's log order: docs/webhooks.md#order), its body the
one stored at its first attempt (docs/webhooks.md#one-id-one-body); test events go out between.
The cursor after a message is stored with the attempt that delivered it, so whatever stops this
worker, the next one (here or in another process) starts where the endpoint is; a message sent
again carries the same ``webhook-id`` and bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NoReturn

from ..common.db import storage_errors
from ..common.http import signing
from ..common.runtime.errors import TransientError
from ..common.tracing import OFF, ROOT, Parent, Tracing
from ..readmodel import cursors
from ..readmodel.announcements import Announcement
from ..readmodel.messages import post_created, webhook_test
from ..readmodel.taxonomy import served_locales
from ..readmodel.walk import Refusal, walk
from ..readmodel.webhook_tests import test_webhook_id
from .endpoint_record import Endpoint
from .metrics import WebhookMetrics
from .schedule import AttemptResult, due_to_disable, next_delay
from .sender import Sender
from .settings import WebhooksConfig
from .sql import KEPT_ATTEMPTS
from .store import Attempt, DeliveryProgress, LeaseLost, Store, utcnow
from .traced import page_parents, post_id, traced_attempt

log = logging.getLogger(__name__)

#: Announcements read per walk.
PAGE = 100
#: An idle endpoint walks again at least this often (a new post's push normally wakes it first).
IDLE_POLL_S = 1.0
#: After the database failed, the next try waits this long.
STORAGE_RETRY_S = 1.0


class Disabled(Exception):
    """The endpoint was disabled (the reason is stored)."""


class ReplayAsked(Exception):
    """An operator asked for a replay: the walk starts again from its cursor."""


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """What every worker of a process uses (the worker context, as Svix calls it): settings,
    store, sender, metrics, the posts topic and the signing key."""

    config: WebhooksConfig
    store: Store
    sender: Sender
    metrics: WebhookMetrics
    topic: str
    signing_key: bytes
    tracing: Tracing = OFF


def webhook_id(epoch: str, item: Announcement) -> str:
    """The message's ``webhook-id``: the same for every attempt, every endpoint and every replay of
    one announcement."""
    return f"msg_{epoch}_{item.partition}_{item.offset}_{item.lang}"


class EndpointWorker:
    def __init__(
        self,
        context: WorkerContext,
        endpoint: Endpoint,
        progress: DeliveryProgress,
        lease_short: asyncio.Event | None = None,
    ) -> None:
        self.context = context
        self.endpoint = endpoint
        self.changed = asyncio.Event()
        self.wake = asyncio.Event()
        #: Where the endpoint is: the stored cursor (None: not started), and where the walk is.
        self.stored = progress.cursor
        self.at = progress.cursor
        self.replay_seq = progress.replay_seq
        #: Claimed while disabled (an operator's resume enabled it): enabled again when it starts.
        self.enable_on_start = progress.disabled
        self.failed_attempts = progress.attempt
        self.retry_at = time.monotonic() + progress.retry_in_s
        self.failing_since: float | None = (
            time.monotonic() - progress.failing_for_s if progress.failing_for_s is not None else None
        )
        self.behind_since: float | None = None
        self.unpruned = 0
        #: Test events to send (their numbers, oldest first), and the last one sent by this worker.
        self.tests: list[int] = []
        self.last_test = 0
        #: Monotonic time until which this process's lease is certainly held.
        self.lease_deadline = time.monotonic() + context.config.webhooks_lease_ttl_s
        #: Set (for the dispatcher) when an attempt waits for the lease to be renewed.
        self.lease_short = lease_short if lease_short is not None else asyncio.Event()

    # ------------------------------------------------------------------ state the dispatcher reads

    def update(self, endpoint: Endpoint) -> None:
        if endpoint != self.endpoint:
            self.endpoint = endpoint
            self.changed.set()

    def tests_due(self, numbers: list[int]) -> None:
        """The test events waiting for the endpoint (the dispatcher's round reads them)."""
        new = [n for n in numbers if n > self.last_test and n not in self.tests]
        if new:
            self.tests = sorted([*self.tests, *new])
            self.wake.set()
            self.changed.set()

    def backlog_age(self) -> float:
        since = [t for t in (self.behind_since, self.failing_since) if t is not None]
        return time.monotonic() - min(since) if since else 0.0

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Deliver until cancelled, the lease is lost (:class:`LeaseLost`) or the endpoint is disabled."""
        while True:
            try:
                await self._deliver_pages()
            except TransientError as e:
                log.warning("webhook endpoint %s: %s; retrying in %g s", self.endpoint.id, e, STORAGE_RETRY_S)
                await asyncio.sleep(STORAGE_RETRY_S)
            except ReplayAsked:
                continue

    async def _deliver_pages(self) -> None:
        if self.enable_on_start:
            await self.context.store.enable(self.endpoint.id)
            self.enable_on_start, self.failed_attempts, self.failing_since = False, 0, None
            log.info("webhook endpoint %s enabled again by an operator", self.endpoint.id)
        while True:
            await self._start_replay_if_asked()
            await self._send_tests()
            with storage_errors("walk the endpoint's announcements"):
                served = await served_locales(self.context.store.pool)
                if self.at is None:  # registered without a start: deliveries start at the frontier
                    frontier = await walk(self.context.store.pool, self.context.topic, None, served, limit=0)
                    assert not isinstance(frontier, Refusal)
                    self.at = frontier.cursor()
            if self.stored is None:
                await self.context.store.replay(self.endpoint.id, self.at, self.replay_seq)
                self.stored = self.at
            with storage_errors("walk the endpoint's announcements"):
                page = await walk(
                    self.context.store.pool,
                    self.context.topic,
                    cursors.decode(self.at),
                    served,
                    limit=PAGE,
                    filter=self.endpoint.filter,
                )
            if isinstance(page, Refusal):
                await self._disable(f"its cursor cannot be walked: {page.message}")
            if not page.items:
                self.at, self.behind_since = page.cursor(), None
                await self._idle()
                continue
            if self.behind_since is None:
                self.behind_since = time.monotonic()
            tracing = self.context.tracing
            parents = await page_parents(tracing, self.context.store.pool, page.items) if tracing.enabled else {}
            for item, after in page.each():
                await self._deliver(page.epoch, item, after, parents.get(post_id(item), ROOT) if parents else ROOT)
                self.at = after
            if not page.has_more:
                self.at = page.cursor()

    async def _idle(self) -> None:
        self.wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(IDLE_POLL_S):
                await self._either(self.wake, self.changed)

    @staticmethod
    async def _either(*events: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _start_replay_if_asked(self) -> None:
        ep = self.endpoint
        if ep.replay_seq > self.replay_seq and ep.replay_from is not None:
            try:
                cursors.decode(ep.replay_from)
            except cursors.InvalidCursor as e:
                await self._disable(f"the replay's cursor is not valid: {e}")
            await self.context.store.replay(ep.id, ep.replay_from, ep.replay_seq)
            log.info("webhook endpoint %s: replay %d started", ep.id, ep.replay_seq)
            self.replay_seq, self.at, self.stored = ep.replay_seq, ep.replay_from, ep.replay_from
            self.failed_attempts, self.failing_since, self.retry_at = 0, None, 0.0

    async def _disable(self, reason: str, attempt: Attempt | None = None) -> NoReturn:
        await self.context.store.disable(self.endpoint.id, self.endpoint.version, reason, attempt)
        log.warning("webhook endpoint %s disabled: %s", self.endpoint.id, reason)
        raise Disabled(reason)

    async def _wait_until_due(self) -> None:
        """Until the next attempt is due; earlier when the endpoint changes (a replay is then started)."""
        while (left := self.retry_at - time.monotonic()) > 0:
            await self._send_tests()  # a test event is sent while a message waits for its retry too
            if (left := self.retry_at - time.monotonic()) <= 0:
                break
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.changed.wait()
            if self.endpoint.replay_seq > self.replay_seq:
                raise ReplayAsked

    async def _lease_outlasting(self, seconds: float) -> None:
        """Until the lease is certainly held for ``seconds`` more (the dispatcher renews it when
        asked); :class:`LeaseLost` when it expires meanwhile. An attempt that could outlast the
        lease never starts, so two dispatchers never send to one endpoint at once."""
        while self.lease_deadline - time.monotonic() < seconds:
            if time.monotonic() >= self.lease_deadline:
                raise LeaseLost(self.endpoint.id)
            self.lease_short.set()
            await asyncio.sleep(0.02)

    async def _post(self, msg_id: str, body: bytes, at: datetime, parent: Parent = ROOT) -> AttemptResult:
        """One attempt: ``body`` signed for ``at``, POSTed while the lease outlasts the attempt
        (with tracing on, under a span child of ``parent``: :mod:`.traced`)."""
        config = self.context.config
        await self._lease_outlasting(config.webhooks_attempt_timeout_s + 1)
        ep = self.endpoint
        secrets = ep.secrets(self.context.signing_key, config.webhooks_rotation_window_s, at)
        headers = signing.headers(msg_id, int(at.timestamp()), body, secrets)
        if self.context.tracing.enabled:
            c = self.context
            return await traced_attempt(c.tracing, c.sender, c.metrics, ep.id, ep.url, headers, body, parent)
        result = await self.context.sender.attempt(ep.url, headers, body)
        self.context.metrics.attempted(result)
        return result

    async def _send_tests(self) -> None:
        """Send the waiting test events (docs/webhooks.md#test-events), each once, out of band:
        recorded in the attempt log, the cursor untouched, whatever the answer."""
        while self.tests:
            n, endpoint_id = self.tests[0], self.endpoint.id
            msg_id = test_webhook_id(endpoint_id, n)
            body = await self.context.store.message_body(endpoint_id, msg_id, webhook_test(endpoint_id))
            at = utcnow()
            result = await self._post(msg_id, body, at)
            await self.context.store.test_sent(endpoint_id, n, Attempt(msg_id, 1, at, result, type="webhook.test"))
            self.tests.pop(0)
            self.last_test = n
            log.info("webhook endpoint %s: test event %d sent (%s)", endpoint_id, n, result.outcome)

    async def _deliver(self, epoch: str, item: Announcement, after: str, parent: Parent = ROOT) -> None:
        """POST one message until the endpoint acknowledges it; its cursor stored with that attempt
        (each attempt's span, with tracing on, a child of ``parent``: the post's stored context)."""
        msg_id = webhook_id(epoch, item)
        # One id, one body (docs/webhooks.md#one-id-one-body): the bytes its first attempt sent.
        body = await self.context.store.message_body(
            self.endpoint.id, msg_id, post_created(item.lean, item.partition, item.offset, after)
        )
        config = self.context.config
        while True:
            await self._wait_until_due()
            if self.endpoint.replay_seq > self.replay_seq:
                raise ReplayAsked
            ep, at = self.endpoint, utcnow()
            result = await self._post(msg_id, body, at, parent)
            number = self.failed_attempts + 1
            self.unpruned += 1
            if self.unpruned >= KEPT_ATTEMPTS:
                await self.context.store.prune(ep.id)
                self.unpruned = 0
            if result.outcome == "delivered":
                await self.context.store.delivered(ep.id, after, Attempt(msg_id, number, at, result))
                self.stored, self.failed_attempts, self.failing_since, self.retry_at = after, 0, None, 0.0
                return
            if result.outcome == "gone":
                await self._disable("the endpoint answered 410 Gone", Attempt(msg_id, number, at, result))
            delay = next_delay(number, config.webhooks_retry_scale, result.retry_after_s)
            failing_for = await self.context.store.failed(
                ep.id, Attempt(msg_id, number, at, result, at + timedelta(seconds=delay)), delay
            )
            self.failed_attempts, self.retry_at = number, time.monotonic() + delay
            if self.failing_since is None:
                self.failing_since = time.monotonic() - failing_for
            if due_to_disable(failing_for, config.webhooks_disable_after_s, config.webhooks_retry_scale):
                await self._disable(f"failing for {failing_for:.0f} s; last attempt: {result.error}")
