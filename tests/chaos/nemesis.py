"""The nemesis: faults in a random order (``random.Random(seed)``), one after another with a
few seconds between them, each recorded as a span in the :class:`History`.

- ``kill <service>``: SIGKILL of the projector, the api or the stream (the harness's
  supervisor restarts it); the span lasts until the new process is ready;
- ``pause <service>``: SIGSTOP for 2 to 6 s, then SIGCONT;
- ``kill replica``: SIGKILL of the replica's processes, started again at once;
- ``pause replica``: SIGSTOP of the replica's processes for 2 to 6 s;
- ``restart primary``: the PostgreSQL primary stopped and started again (same port, same data);
- ``restart kafka``: SIGKILL of the Apache Kafka node, started again on its log;
- ``cut primary|replica|kafka``: a partition between the services and that server for 2 to
  6 s (their connections dropped, new ones held: tests/support/links.py);
- ``slow primary|replica|kafka``: 50 to 400 ms added to every chunk each way between the
  services and that server, for 3 to 8 s.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal

from tests.chaos.harness import Cluster
from tests.chaos.history import Fault, History
from tests.support.replicas import signal_server

#: Each kind and its weight: the projector's SIGKILL (the slowest recovery) comes most often.
KINDS = {
    "kill projector": 3,
    "kill api": 2,
    "kill stream": 2,
    "pause projector": 1,
    "pause api": 1,
    "pause stream": 1,
    "kill replica": 1,
    "pause replica": 1,
    "restart primary": 1,
    "restart kafka": 1,
    "cut primary": 1,
    "cut replica": 1,
    "cut kafka": 1,
    "slow primary": 1,
    "slow replica": 1,
    "slow kafka": 1,
}
GAP_S = (3.0, 7.0)
PAUSE_S = (2.0, 6.0)
SLOW_S = (3.0, 8.0)
DELAY_S = (0.05, 0.4)


class Nemesis:
    def __init__(self, cluster: Cluster, history: History, rng: random.Random) -> None:
        self.cluster, self.history, self.rng = cluster, history, rng

    async def run(self, stop: asyncio.Event) -> None:
        kinds, weights = list(KINDS), list(KINDS.values())
        while not stop.is_set():
            await asyncio.sleep(self.rng.uniform(*GAP_S))
            if stop.is_set():
                return
            kind = self.rng.choices(kinds, weights)[0]
            start = self.history.now()
            await self.inject(kind)
            self.history.faults.append(Fault(kind, start, self.history.now()))

    async def inject(self, kind: str) -> None:
        verb, _, target = kind.partition(" ")
        if target in ("projector", "api", "stream"):
            service = self.cluster.current[target]
            if verb == "kill":
                service.proc.kill()
                await asyncio.sleep(0.5)  # the supervisor sees it within a quarter of a second
                await self.cluster.ready(target)
            else:
                os.kill(service.proc.pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(self.rng.uniform(*PAUSE_S))
                finally:
                    os.kill(service.proc.pid, signal.SIGCONT)
        elif kind == "kill replica":
            replica = self.cluster.replica
            await asyncio.to_thread(signal_server, replica, signal.SIGKILL)
            await asyncio.to_thread(replica.stop)
            await asyncio.to_thread(replica.start)
        elif kind == "pause replica":
            await asyncio.to_thread(signal_server, self.cluster.replica, signal.SIGSTOP)
            try:
                await asyncio.sleep(self.rng.uniform(*PAUSE_S))
            finally:
                await asyncio.to_thread(signal_server, self.cluster.replica, signal.SIGCONT)
        elif kind == "restart primary":
            await asyncio.to_thread(self.cluster.primary.stop)
            await asyncio.to_thread(self.cluster.primary.start)
        elif kind == "restart kafka":
            await asyncio.to_thread(self.cluster.kafka.kill)
            await asyncio.to_thread(self.cluster.kafka.start)
        elif verb in ("cut", "slow") and target in self.cluster.links:
            link = self.cluster.links[target]
            if verb == "cut":
                await asyncio.to_thread(link.cut)
                span = self.rng.uniform(*PAUSE_S)
            else:
                link.slow(self.rng.uniform(*DELAY_S))
                span = self.rng.uniform(*SLOW_S)
            try:
                await asyncio.sleep(span)
            finally:
                await asyncio.to_thread(link.heal)
        else:
            raise ValueError(f"unknown fault {kind!r}")
