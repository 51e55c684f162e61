"""The topic check of a long-running process that reads the log (projector, stream), as a gate.

Before the process starts its work it checks the cluster's topics against the declaration
(:func:`.topics.check_topics`; the projector creates missing ones first). A configuration that
would make a rebuild lose history (a topic not compacted, another partition count) is refused
loudly and the process waits, instead of exiting:

- an ERROR line naming every such difference (again whenever the differences change);
- the gauge ``tickerwire_topic_differences{kind}`` (``loses_history``: the refused ones;
  ``other``: missing topics, a lower replication factor, ``min.insync.replicas``), always set,
  so an alert sees a setting allowed with ``TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS`` too;
- readiness check ``topics`` not ready, with the differences as its detail, while the admin
  listener answers (the partner listener is not bound, nothing is consumed);
- the way out (docs/operations.md, "Topics"): fix the topics, which the gate sees at its next
  check (every :data:`RECHECK_S`) and then lets the process start; or set
  ``TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS=1`` and restart.

Once the process runs, the gate keeps watching (every :data:`WATCH_S`, a supervised task): a
topic recreated behind the process's back (an emptied broker, on which a client's request had
the broker create it with its own settings) sets the gauge and logs the differences at ERROR
(and the projector creates a missing one as declared first). The process goes on working,
ready: what it consumes is still right; what is at stake is the next rebuild, and the alert
on the gauge says so. Before, the gauge kept its start-up value.

The command line (``tickerwire projector rebuild``) refuses the same configuration with one
line and status 2 (:func:`require_safe_topics`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator

from aiohttp import web
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, Gauge

from ..runtime.config import Config
from ..runtime.errors import BrokerUnavailable, ConfigError
from ..runtime.retry import retry_transient
from ..runtime.supervise import supervisor_of
from . import topics
from .declaration import Difference

log = logging.getLogger(__name__)

#: How often a refused topic configuration is checked again.
RECHECK_S = 30.0
#: How often a running process checks its topics again.
WATCH_S = 60.0


async def _read(config: Config, create: bool) -> list[Difference]:
    """How the topics differ from the declaration, after creating missing ones when ``create``."""
    if create:
        await topics.ensure_topics(config)
    return await topics.check_topics(config)


async def differences(config: Config, *, create: bool) -> list[Difference]:
    """:func:`_read`, waiting with capped backoff for the broker."""
    return await retry_transient(lambda: _read(config, create), what="check topics", cap=5.0)


def _allowed(config: Config, unsafe: list[Difference]) -> bool:
    """Whether the operator allowed ``unsafe`` settings; said at ERROR either way it is used."""
    if config.kafka_allow_unsafe_topics:
        log.error(
            "TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS is set: starting although topic settings lose rebuild history: %s",
            "; ".join(str(d) for d in unsafe),
        )
        return True
    return False


async def require_safe_topics(config: Config, *, create: bool) -> None:
    """The command line's check (a rebuild, which lost history would break): logs each
    difference and refuses (ConfigError: one line, status 2) a setting that loses history,
    unless TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS is set."""
    diffs = await differences(config, create=create)
    for d in diffs:
        log.warning("topic differs from its declaration: %s", d)
    unsafe = [d for d in diffs if d.loses_history]
    if unsafe and not _allowed(config, unsafe):
        raise ConfigError(
            "topics would lose rebuild history: "
            + "; ".join(str(d) for d in unsafe)
            + ". Fix them (see docs/operations.md, 'Topics') or set TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS=1"
        )


class TopicGate:
    def __init__(
        self,
        config: Config,
        registry: CollectorRegistry,
        *,
        create: bool,
        recheck_s: float = RECHECK_S,
        watch_s: float = WATCH_S,
    ) -> None:
        self.config = config
        self.create = create
        self.recheck_s = recheck_s
        self.watch_s = watch_s
        self.differences = Gauge(
            "tickerwire_topic_differences",
            "Ways the cluster's topics differ from the declaration at the last check; kind=loses_history "
            "are refused (the process waits, not ready) unless TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS is set",
            ["kind"],
            registry=registry,
        )
        for kind in ("loses_history", "other"):  # at 0 before the first check: an alert reads them
            self.differences.labels(kind)
        self.state: tuple[bool, str] = (False, "checking the topics")
        self._reported: tuple[str, ...] = ()

    async def check(self) -> tuple[bool, str]:
        """Readiness: whether the topics let this process work."""
        return self.state

    def _record(self, diffs: list[Difference]) -> tuple[list[Difference], bool]:
        """Set the gauge from ``diffs``; their unsafe part, and whether they changed since the
        last check (what is logged is logged once per change)."""
        unsafe = [d for d in diffs if d.loses_history]
        self.differences.labels("loses_history").set(len(unsafe))
        self.differences.labels("other").set(len(diffs) - len(unsafe))
        described = tuple(str(d) for d in diffs)
        changed, self._reported = described != self._reported, described
        if changed:
            for d in diffs:
                if not d.loses_history:
                    log.warning("topic differs from its declaration: %s", d)
        return unsafe, changed

    async def wait_until_safe(self) -> None:
        """Return once no topic setting loses history (or that is allowed); until then, report
        the refusal and check again every ``recheck_s``."""
        while True:
            unsafe, _ = self._record(await differences(self.config, create=self.create))
            if not unsafe:
                self.state = (True, "ok")
                return
            listed = "; ".join(str(d) for d in unsafe)
            if _allowed(self.config, unsafe):
                self.state = (True, f"allowed by TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS: {listed}")
                return
            reason = f"topics would lose rebuild history: {listed}"
            if self.state[1] != reason:
                log.error(
                    "%s. Not starting: fix them (docs/operations.md, 'Topics'; checked again every %g s) "
                    "or set TICKERWIRE_KAFKA_ALLOW_UNSAFE_TOPICS=1 and restart",
                    reason,
                    self.recheck_s,
                )
            self.state = (False, reason)
            await asyncio.sleep(self.recheck_s)

    async def watch(self) -> None:
        """While the process runs: check the topics every ``watch_s``; set the gauge, and log
        differences that lose history at ERROR when they change. A round the broker does not
        answer is skipped (the outage is reported where it hurts: readiness, the consumers)."""
        while True:
            await asyncio.sleep(self.watch_s)
            try:
                async with asyncio.timeout(self.watch_s):  # a round that hangs is skipped, not waited on
                    diffs = await _read(self.config, self.create)
            except (BrokerUnavailable, KafkaError, OSError, asyncio.TimeoutError) as exc:
                log.debug("topic watch skipped a round: %s", exc)
                continue
            unsafe, changed = self._record(diffs)
            if not changed:
                continue
            for d in unsafe:
                log.error(
                    "topic now differs from its declaration and would lose rebuild history: %s. "
                    "Consuming goes on; fix it before the next rebuild (docs/operations.md, 'Topics')",
                    d,
                )
            listed = "; ".join(str(d) for d in unsafe)
            self.state = (True, f"running; topics would lose rebuild history: {listed}" if unsafe else "ok")


TOPIC_GATE = web.AppKey("topic_gate", TopicGate)


def install(app: web.Application, gate: TopicGate) -> None:
    """Make ``gate`` the first step of ``app``'s start-up: nothing after it (pools, consumers,
    the partner listener) starts until the topics let the process work; then it keeps watching
    them (supervised) while the process runs."""

    async def gate_ctx(app: web.Application) -> AsyncIterator[None]:
        await app[TOPIC_GATE].wait_until_safe()
        yield

    app[TOPIC_GATE] = gate
    app.cleanup_ctx.insert(0, gate_ctx)
    app.cleanup_ctx.insert(1, supervisor_of(app).task("topic-watch", lambda a: a[TOPIC_GATE].watch()))
