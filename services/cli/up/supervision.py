"""Keeping the stack of ``tickerwire up`` running: dead children, embedded servers and the
broker of its own are restarted, and the demo trickle kept going."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ...common.runtime.retry import backoff_delays
from ..settings import FullConfig
from .children import HEALTHY_AFTER_S, RESTART_BASE_S, RESTART_CAP_S, Stack
from .demo import Trickle
from .embedded import Embedded
from .failover import fail_over
from .output import say
from .state import write_state


@dataclass
class Supervision:
    """Keeps the stack running: restarts dead children, the embedded PostgreSQL and the
    Apache Kafka of its own (which comes back with its log), and keeps the demo trickle going;
    says what it does on the output."""

    stack: Stack
    config: FullConfig
    parts: Embedded
    trickle: Trickle | None
    state_file: Path
    info: dict
    _trickle_task: asyncio.Task | None = None

    async def run(self) -> None:
        self._start_trickle()
        failover = asyncio.Event()
        if self.parts.replicas:
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, failover.set)  # `tickerwire failover`
        try:
            while True:
                await asyncio.sleep(0.25)
                if failover.is_set():
                    failover.clear()
                    await self._fail_over()
                if self.parts.postgres is not None and not self.parts.postgres.running():
                    await self._restart_server(self.parts.postgres, "PostgreSQL")
                for n, replica in enumerate(self.parts.replicas, start=1):
                    if not replica.running():
                        await self._restart_server(replica, f"PostgreSQL replica {n}")
                if self.parts.broker is not None and not self.parts.broker.running():
                    await self._recover_broker()
                self._restart_children()
        finally:
            if self._trickle_task is not None:
                self._trickle_task.cancel()

    def _start_trickle(self) -> None:
        if self.trickle is not None and (self._trickle_task is None or self._trickle_task.done()):
            self._trickle_task = asyncio.create_task(self.trickle.run_forever(), name="demo-trickle")

    def _restart_children(self) -> None:
        changed = False
        now = time.monotonic()
        for child in self.stack.children:
            if child.alive():
                continue
            if child.restart_at is None:
                if now - child.started_at >= HEALTHY_AFTER_S:
                    child.delays = backoff_delays(RESTART_BASE_S, RESTART_CAP_S)
                delay = next(child.delays)
                child.restart_at = now + delay
                say(
                    f"{child.name} exited (status {child.proc.returncode if child.proc else '?'}); "
                    f"restarting it in {delay:.1f}s (log: {child.log_path})"
                )
            elif now >= child.restart_at:
                proc = child.spawn()
                child.restarts += 1
                child.restart_at = None
                say(f"{child.name} restarted (pid {proc.pid}, restart {child.restarts})")
                changed = True
        if changed:
            write_state(self.state_file, self.info, self.stack)

    async def _restart_server(self, server, what: str) -> None:
        say(f"embedded {what} died; restarting it on port {server.port}")
        started = time.monotonic()
        delays = backoff_delays(RESTART_BASE_S, RESTART_CAP_S)
        with contextlib.suppress(Exception):
            server.stop()  # reap it and close its log
        while True:
            try:
                await asyncio.to_thread(server.start)
                break
            except Exception as exc:
                delay = next(delays)
                say(f"embedded {what} did not start ({str(exc).splitlines()[0]}); retrying in {delay:.1f}s")
                await asyncio.sleep(delay)
        say(f"embedded {what} restarted in {time.monotonic() - started:.1f}s (pid {server.pid})")

    async def _fail_over(self) -> None:
        try:
            await fail_over(self.parts, self.stack.embedded)
        except Exception as exc:  # noqa: BLE001 - said, and the supervision goes on restarting what is down
            say(f"failover failed: {str(exc).splitlines()[0]}")
            self.info["failover"] = {"at": time.time(), "error": str(exc).splitlines()[0]}
        else:
            assert self.parts.postgres is not None
            self.info["postgres_primary_port"] = self.parts.postgres.port
            self.info["failover"] = {"at": time.time(), "primary_port": self.parts.postgres.port}
        write_state(self.state_file, self.info, self.stack)

    async def _recover_broker(self) -> None:
        """A node that died is restarted on its log and ports: a cluster goes on without it
        meanwhile (it rejoins the quorum); a single node's clients wait for it, and nothing
        needs re-syncing (the projector goes on from its stored positions)."""
        nodes = getattr(self.parts.broker, "nodes", None)
        if nodes is not None:
            for node in nodes:
                if not node.running():
                    await self._restart_server(node, f"Apache Kafka node {node.node_id}")
            self._start_trickle()
            return
        own = self.parts.own
        await self._restart_server(self.parts.broker, "Apache Kafka" if own is None else own.label)
        if own is not None:
            say(f"{own.label} came back with its log ({own.data_dir}): nothing to re-sync, the projector goes on")
        self._start_trickle()
