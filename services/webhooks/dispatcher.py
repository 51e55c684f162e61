"""The dispatcher's scheduling round (docs/webhooks.md#dispatchers): every second, and when an
endpoint changes, it reads the endpoints, renews the leases it holds, takes the lease of
deliverable endpoints nobody holds (a few per round, so several processes share them), and
runs one :class:`.worker.EndpointWorker` per endpoint it holds. A worker whose lease is lost, or
whose endpoint is paused, removed or disabled, is stopped; one that crashed is logged at ERROR,
counted, and started again at the next round. A new post wakes every idle worker. Every
:data:`PRUNE_EVERY_S` a round also forgets the message bodies older than the retention
(docs/webhooks.md#one-id-one-body).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

from ..common.runtime.errors import TransientError
from .endpoint_record import Endpoint
from .store import LeaseLost
from .worker import Disabled, EndpointWorker, WorkerContext

log = logging.getLogger(__name__)

#: Seconds between rounds (an endpoint change starts one at once).
ROUND_S = 1.0
#: Endpoints one round takes at most: with several processes, each takes a share.
CLAIM_PER_ROUND = 8
#: Seconds between two prunings of the stored message bodies.
PRUNE_EVERY_S = 60.0


class Dispatcher:
    def __init__(self, context: WorkerContext) -> None:
        self.context = context
        self.workers: dict[str, tuple[EndpointWorker, asyncio.Task[None]]] = {}
        self.round_now = asyncio.Event()
        #: Unix time of the last completed round, and why the last one failed (None: it did not).
        self.last_round = 0.0
        self.last_error: str | None = None
        self._renewed_at = 0.0
        #: A worker waits for its lease to be renewed (it set ``round_now``): renew this round.
        self._lease_wanted = False
        self._pruned_at = 0.0

    def posts_changed(self) -> None:
        for worker, _ in self.workers.values():
            worker.wake.set()

    async def run(self) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(max(ROUND_S * 5, 10.0)):
                        await self.round()
                    self.last_round, self.last_error = time.time(), None
                    self.context.metrics.last_round.set(self.last_round)
                except (TransientError, TimeoutError) as e:
                    self.last_error = str(e) or type(e).__name__
                    log.warning("webhook scheduling round failed: %s", self.last_error)
                self.round_now.clear()
                try:
                    async with asyncio.timeout(ROUND_S):
                        await self.round_now.wait()
                except TimeoutError:
                    pass
                self._lease_wanted = self.round_now.is_set()
        finally:
            await self.stop_all()

    async def round(self) -> None:
        listed = await self.context.store.endpoints()
        by_id = {e.id: (e, leased, owner) for e, leased, owner in listed}
        self._reap()
        for endpoint_id in list(self.workers):
            entry = by_id.get(endpoint_id)
            if entry is None or not entry[0].deliverable:
                await self._stop(endpoint_id, release=True)
            else:
                self.workers[endpoint_id][0].update(entry[0])
        await self._renew()
        if self.workers:
            pending = await self.context.store.pending_tests(list(self.workers))
            for endpoint_id, numbers in pending.items():
                if endpoint_id in self.workers:
                    self.workers[endpoint_id][0].tests_due(numbers)
        room = self.context.config.webhooks_max_endpoints - len(self.workers)
        mine = self.context.store.owner  # a lease of ours without a worker: its worker ended (a crash); take it again
        free = [
            e.id
            for e, leased, owner in listed
            if e.deliverable and (not leased or owner == mine) and e.id not in self.workers
        ]
        random.shuffle(free)
        if room > 0 and free:
            for progress in await self.context.store.claim(free[: min(room, CLAIM_PER_ROUND)]):
                endpoint = by_id[progress.endpoint_id][0]
                worker = EndpointWorker(self.context, endpoint, progress, self.round_now)
                task = asyncio.create_task(worker.run(), name=f"webhook-{endpoint.id}")
                self.workers[endpoint.id] = (worker, task)
                log.info("webhook endpoint %s: delivering from this process", endpoint.id)
        self._report(listed)
        if time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = time.monotonic()
            forgotten = await self.context.store.prune_messages(self.context.config.webhooks_message_retention_s)
            if forgotten:
                log.info("webhook messages: %d bodies past the retention forgotten", forgotten)

    async def _renew(self) -> None:
        due = time.monotonic() - self._renewed_at >= self.context.config.webhooks_lease_ttl_s / 3
        if not self.workers or not (due or self._lease_wanted):
            return
        started = time.monotonic()
        held = await self.context.store.renew(list(self.workers))
        self._renewed_at = started
        for endpoint_id in list(self.workers):
            if endpoint_id in held:
                self.workers[endpoint_id][0].lease_deadline = started + self.context.config.webhooks_lease_ttl_s
            else:
                log.warning("webhook endpoint %s: lease lost; another dispatcher delivers to it", endpoint_id)
                await self._stop(endpoint_id, release=False)

    def _reap(self) -> None:
        """Workers that ended: lost lease or disabled (expected), or crashed (ERROR, counted)."""
        for endpoint_id, (_, task) in list(self.workers.items()):
            if not task.done():
                continue
            del self.workers[endpoint_id]
            self._unlabel(endpoint_id)
            if task.cancelled():
                continue
            exc = task.exception()
            if isinstance(exc, (LeaseLost, Disabled)):
                continue
            self.context.metrics.worker_crashes.inc()
            log.error("webhook endpoint %s: its worker crashed; starting it again", endpoint_id, exc_info=exc)

    def _unlabel(self, endpoint_id: str) -> None:
        with contextlib.suppress(KeyError):  # never reported
            self.context.metrics.backlog_age.remove(endpoint_id)

    async def _stop(self, endpoint_id: str, *, release: bool) -> None:
        worker_task = self.workers.pop(endpoint_id, None)
        if worker_task is not None:
            worker_task[1].cancel()
            await asyncio.gather(worker_task[1], return_exceptions=True)
        self._unlabel(endpoint_id)
        if release:
            await self.context.store.release([endpoint_id])

    async def stop_all(self) -> None:
        tasks = [t for _, t in self.workers.values()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ids = list(self.workers)
        self.workers.clear()
        if ids:
            try:
                await self.context.store.release(ids)  # the next holder need not wait for the leases to expire
            except TransientError as e:
                log.warning("could not release webhook leases on stop (%s): they expire by themselves", e)

    def _report(self, listed: list[tuple[Endpoint, bool, str | None]]) -> None:
        m = self.context.metrics
        failing = 0
        for endpoint_id, (worker, _) in self.workers.items():
            m.backlog_age.labels(endpoint_id).set(worker.backlog_age())
            failing += worker.failing
        m.endpoints.labels("active").set(len(self.workers) - failing)
        m.endpoints.labels("failing").set(failing)
        m.endpoints.labels("paused").set(sum(e.status == "paused" for e, _, _ in listed))
        disabled = sum(e.disabled for e, _, _ in listed)
        m.endpoints.labels("disabled").set(disabled)
        m.disabled.set(disabled)

    def stalled(self, after_s: float) -> str | None:
        """Why the rounds stopped, or None when the last one completed within ``after_s``."""
        if self.last_round == 0.0:
            return "no scheduling round completed yet" + (f" ({self.last_error})" if self.last_error else "")
        age = time.time() - self.last_round
        if age > after_s:
            return f"no scheduling round for {age:.0f} s" + (f": {self.last_error}" if self.last_error else "")
        return None
