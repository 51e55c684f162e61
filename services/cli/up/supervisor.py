"""Keeping the stack of ``tickerwire up`` running, the way process supervisors people trust do
it (supervisord, honcho): one supervised-part type, :class:`Part`, for a service process and an
embedded server alike, in one of four explicit states, moved between them by one path.

- ``starting``: its start is under way (a service process is spawned; an embedded server's
  start returns once it accepts connections);
- ``running``: started and alive;
- ``backoff``: it died, or its start failed; the next start is due after a full-jitter pause
  (between 0 and a ceiling of 0.5 s that doubles per failure up to 10 s; a part that ran
  60 s since its last start counts as healthy again, and the ceiling starts over);
- ``fatal``: its start failed :data:`MAX_FAILED_STARTS` times in a row; ``up`` tries no more
  (the rest of the stack goes on) and says so at ERROR, naming the log to read.

Every transition is one line on ``up``'s output (``api exited (status -9): running → backoff;
...``) and is written to ``up.json`` under ``parts``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ...common.runtime.retry import backoff_delays
from .children import Child, Stack
from .demo import Trickle
from .embedded import Embedded
from .failover import fail_over
from .output import one_line, say
from .state import write_state

log = logging.getLogger("tickerwire.up")

#: Restarts: full-jitter backoff from 0.5 s, capped at 10 s; a part that ran this long since
#: its last start counts as healthy again (the backoff starts over).
RESTART_BASE_S = 0.5
RESTART_CAP_S = 10.0
HEALTHY_AFTER_S = 60.0
#: Starts that failed in a row before a part is fatal (about a minute of tries at the cap).
MAX_FAILED_STARTS = 10
#: How often the supervisor looks at every part.
TICK_S = 0.25


class State(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    FATAL = "fatal"


def restart_delays() -> Iterator[float]:
    return backoff_delays(RESTART_BASE_S, RESTART_CAP_S)


@dataclass(eq=False)
class Part:
    """One supervised part of ``up``'s stack: what it is (``name`` in ``up.json``, ``label`` on
    the output), how to tell it is alive, how to start it again, and where it is in its life."""

    name: str
    label: str
    alive: Callable[[], bool]
    #: Starts it; returns once it is started (raises: the start failed).
    start: Callable[[], Coroutine[Any, Any, None]]
    pid: Callable[[], int | None]
    #: Why it is no longer alive, for the output (``status -9``).
    gone: Callable[[], str] = lambda: "died"
    #: Its log now (a server's role may pass to another server, with another log, at a failover).
    log: Callable[[], Path | None] = lambda: None
    #: Said once it runs again after a restart.
    came_back: str = ""
    state: State = State.RUNNING
    restarts: int = 0
    failed_starts: int = 0
    #: Why it left ``running`` the last time ('' while it never did).
    reason: str = ""
    started_at: float = field(default_factory=time.monotonic)
    next_start_at: float | None = None
    delays: Iterator[float] = field(default_factory=restart_delays)
    task: asyncio.Task | None = None

    @property
    def log_path(self) -> Path | None:
        return self.log()

    def as_json(self) -> dict:
        return {
            "state": str(self.state),
            "pid": self.pid() if self.state is State.RUNNING else None,
            "restarts": self.restarts,
            "reason": self.reason or None,
            "log": str(self.log_path) if self.log_path else None,
        }


def child_part(child: Child) -> Part:
    """A service process of the stack as a supervised part."""

    async def start() -> None:
        child.spawn()

    def gone() -> str:
        return f"status {child.proc.returncode if child.proc is not None else '?'}"

    return Part(
        child.name,
        child.name,
        child.alive,
        start,
        lambda: child.proc.pid if child.proc is not None else None,
        gone,
        lambda: child.log_path,
    )


def server_part(name: str, label: str, server: Callable, came_back: str = "") -> Part:
    """An embedded server as a supervised part; ``server()`` is the one in that role now (a
    failover gives the roles to other servers)."""

    async def start() -> None:
        with contextlib.suppress(Exception):
            server().stop()  # reap it and close its log
        await asyncio.to_thread(server().start)

    return Part(
        name,
        label,
        lambda: server().running(),
        start,
        lambda: server().pid,
        lambda: "its process is gone",
        lambda: getattr(server(), "log_path", None),
        came_back,
    )


def stack_parts(stack: Stack, parts: Embedded) -> list[Part]:
    """Every part of ``up``'s stack: its service processes, then its embedded servers."""
    found = [child_part(child) for child in stack.children]
    if parts.postgres is not None:
        found.append(server_part("postgres", "embedded PostgreSQL", lambda: parts.postgres))
    for n in range(1, len(parts.replicas) + 1):
        found.append(
            server_part(f"postgres-replica-{n}", f"embedded PostgreSQL replica {n}", lambda n=n: parts.replicas[n - 1])
        )
    for node in parts.kafka_nodes:
        one = len(parts.kafka_nodes) == 1
        found.append(
            server_part(
                "kafka" if one else f"kafka-node-{node.node_id}",
                "embedded Apache Kafka" if one else f"embedded Apache Kafka node {node.node_id}",
                lambda node=node: node,
                f"Apache Kafka{'' if one else f' node {node.node_id}'} came back with its log "
                f"({node.data_dir}): nothing to re-sync, the projector goes on",
            )
        )
    if parts.viewer is not None:
        found.append(
            server_part(
                "phoenix",
                "Phoenix trace viewer",
                lambda: parts.viewer,
                "Phoenix came back on its ports, with the traces it had (they are kept in its database)",
            )
        )
    return found


@dataclass
class StackSupervisor:
    """Moves each :class:`Part` between its states (the only restart path of ``up``), keeps
    the demo trickle going, runs ``tickerwire failover``'s requests, and writes every change
    to ``up.json``."""

    parts: list[Part]
    state_file: Path
    info: dict
    stack: Stack
    embedded: Embedded | None = None
    trickle: Trickle | None = None
    _trickle_task: asyncio.Task | None = None

    def __post_init__(self) -> None:
        self.info["parts"] = self.states()

    def states(self) -> dict[str, dict]:
        return {part.name: part.as_json() for part in self.parts}

    def write(self) -> None:
        self.info["parts"] = self.states()
        write_state(self.state_file, self.info, self.stack)

    async def run(self) -> None:
        failover = asyncio.Event()
        if self.embedded is not None and self.embedded.replicas:
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, failover.set)  # `tickerwire failover`
        try:
            while True:
                self._keep_trickle()
                if failover.is_set():
                    failover.clear()
                    await self._fail_over()
                if self.tick(time.monotonic()):
                    self.write()
                await asyncio.sleep(TICK_S)
        finally:
            for task in [self._trickle_task, *(part.task for part in self.parts)]:
                if task is not None:
                    task.cancel()

    def tick(self, now: float) -> bool:
        """One look at every part: the transitions due now; whether any state changed."""
        changed = False
        for part in self.parts:
            changed |= self._step(part, now)
        return changed

    def _step(self, part: Part, now: float) -> bool:
        if part.state is State.RUNNING and not part.alive():
            if now - part.started_at >= HEALTHY_AFTER_S:
                part.delays = restart_delays()
            self._backoff(part, now, f"{part.label} exited ({part.gone()})", part.gone())
            return True
        if part.state is State.BACKOFF and part.next_start_at is not None and now >= part.next_start_at:
            self._move(part, State.STARTING, f"{part.label} starting")
            part.task = asyncio.create_task(part.start(), name=f"start {part.name}")
            return True
        if part.state is State.STARTING and part.task is not None and part.task.done():
            task, part.task = part.task, None
            failure = task.exception() if not task.cancelled() else asyncio.CancelledError()
            if failure is not None:
                part.failed_starts += 1
                if part.failed_starts >= MAX_FAILED_STARTS:
                    part.reason = f"{part.failed_starts} starts failed in a row, the last: {one_line(failure)}"
                    self._move(part, State.FATAL, f"{part.label} did not start ({one_line(failure)})")
                    log.error("%s is fatal: %s; up tries no more (log: %s)", part.label, part.reason, part.log_path)
                else:
                    self._backoff(part, now, f"{part.label} did not start ({one_line(failure)})", one_line(failure))
                return True
            part.restarts += 1
            part.failed_starts = 0
            part.started_at = now
            self._move(
                part,
                State.RUNNING,
                f"{part.label} restarted (pid {part.pid()}, restart {part.restarts})",
            )
            if part.came_back:
                say(part.came_back)
            return True
        return False

    def _backoff(self, part: Part, now: float, what: str, reason: str) -> None:
        delay = next(part.delays)
        part.reason = reason
        part.next_start_at = now + delay
        log_hint = f" (log: {part.log_path})" if part.log_path else ""
        self._move(part, State.BACKOFF, what, f"; next start in {delay:.1f}s{log_hint}")

    @staticmethod
    def _move(part: Part, to: State, what: str, then: str = "") -> None:
        say(f"{what}: {part.state} → {to}{then}")
        part.state = to

    def _keep_trickle(self) -> None:
        """The demo trickle retries by itself; should it ever end, it is said and started again."""
        if self.trickle is None:
            return
        task = self._trickle_task
        if task is not None and task.done():
            failure = task.exception() if not task.cancelled() else None
            say(f"demo trickle ended ({one_line(failure) if failure else 'cancelled'}); starting it again")
        if task is None or task.done():
            self._trickle_task = asyncio.create_task(self.trickle.run_forever(), name="demo-trickle")

    async def _fail_over(self) -> None:
        assert self.embedded is not None
        down = [p.label for p in self.parts if p.name.startswith("postgres") and p.state is not State.RUNNING]
        try:
            if down:
                raise RuntimeError(f"{', '.join(down)} not running: a failover needs every PostgreSQL server up")
            await fail_over(self.embedded, self.stack.embedded)
        except Exception as exc:  # noqa: BLE001 - said, and the supervision goes on restarting what is down
            say(f"failover failed: {one_line(exc)}")
            self.info["failover"] = {"at": time.time(), "error": one_line(exc)}
        else:
            assert self.embedded.postgres is not None
            self.info["postgres_primary_port"] = self.embedded.postgres.port
            self.info["failover"] = {"at": time.time(), "primary_port": self.embedded.postgres.port}
        self.write()
