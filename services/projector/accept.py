"""``tickerwire projector accept-log --from earliest|latest``: the operator's way out of a log
discontinuity (see :mod:`tickerwire.services.common.kafka.logcheck`).

For every partition of every projector topic whose stored position the log no longer holds,
the stored position is moved to the log's start (``earliest``: re-read everything the log
still has; the version guards make re-reading events already applied change nothing) or to
its end (``latest``: accept the loss, project only what comes next). Positions the log still
holds are left alone. A running projector notices within its log check interval
(``TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S``) and resumes those partitions.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass

from aiokafka import TopicPartition

from tickerwire.schemas.topics import POSTS, topic_name

from ..common import kafka
from ..common.db.command import command_connection
from ..common.kafka.declaration import declared_topics
from ..common.kafka.logcheck import LogProbe, discontinuity
from ..common.runtime.config import Config
from ..common.runtime.logs import setup_logging
from ..common.runtime.process import command_failed
from ..readmodel import cursors, positions


@dataclass(frozen=True)
class Accepted:
    """One line per position moved, and one per position left alone because it moved while the
    command ran (the command should be run again)."""

    moved: list[str]
    left: list[str]


async def accept_log(config: Config, start_from: str = "earliest") -> Accepted:
    """Move every stored position the log does not hold."""
    if start_from not in ("earliest", "latest"):
        raise ValueError(f"--from must be earliest or latest, not {start_from!r}")
    await kafka.ensure_declared_before(config, "reading the log offsets")
    consumer = kafka.consumer(config, group_id=None, client_id="tickerwire-accept-log")
    try:
        await consumer.start()
        tps = [TopicPartition(d.name, p) for d in declared_topics(config) for p in range(d.partitions)]
        starts = await asyncio.wait_for(consumer.beginning_offsets(tps), 30)
        ends = await asyncio.wait_for(consumer.end_offsets(tps), 30)
    except (Exception, asyncio.TimeoutError) as exc:
        await consumer.stop()
        raise kafka.unreachable(config, exc, "cannot read the log offsets from") from exc
    probe = LogProbe(config, "tickerwire-accept-log-probe")
    try:
        async with command_connection(config.direct_url, schema=config.read_model_schema) as conn:
            stored = await positions.load(conn)
            gaps = {
                tp: gap
                for tp in tps
                if (gap := discontinuity(tp, stored.get((tp.topic, tp.partition), 0), starts[tp], ends[tp]))
            }
            # Some brokers report end offsets far behind what they hold: ask the log itself. Before
            # any row is locked: a running projector's commits must not queue behind a broker call.
            held = await probe.held({tp: g.position - 1 for tp, g in gaps.items() if g.position > g.log_end})
            gaps = {tp: gap for tp, gap in gaps.items() if tp not in held}
            async with conn.transaction():
                now = await positions.load(conn, for_update=True)
                # A position that moved since it was read was moved by someone else: not ours to move.
                moved = [tp for tp, gap in gaps.items() if now.get((tp.topic, tp.partition), 0) != gap.position]
                gaps = {tp: gap for tp, gap in gaps.items() if tp not in moved}
                targets = {tp: gap.log_start if start_from == "earliest" else gap.log_end for tp, gap in gaps.items()}
                if targets:
                    await positions.save_many(conn, {(tp.topic, tp.partition): t for tp, t in targets.items()})
                # A posts partition whose log ends before its position holds another log (reset or
                # re-created): a new cursor epoch begins (docs/resume.md).
                posts = topic_name(config.topic_prefix, POSTS)
                renewed = {
                    tp.partition: targets[tp]
                    for tp, gap in gaps.items()
                    if tp.topic == posts and gap.position > gap.log_end
                }
                if renewed:
                    await cursors.new_log(conn, renewed)
    finally:
        await probe.close()
        await consumer.stop()
    return Accepted(
        [
            f"{tp.topic}[{tp.partition}]: position {gap.position} -> {targets[tp]} (log holds {gap.log_start}..{gap.log_end})"
            for tp, gap in gaps.items()
        ],
        [
            f"{tp.topic}[{tp.partition}]: left alone: its position moved while this command ran (is a projector "
            "writing it?); run the command again"
            for tp in moved
        ],
    )


def accept_log_main(config: Config, start_from: str) -> int:
    setup_logging("accept-log", config.log_level)
    kafka.quiet_client_logs()
    try:
        accepted = asyncio.run(accept_log(config, start_from))
    except Exception as exc:  # one line, never a traceback: 2 a setting, 1 the rest
        return command_failed("projector accept-log", exc)
    if accepted.moved or not accepted.left:
        print("\n".join(accepted.moved) or "every stored position is in the log; nothing to accept")
    for line in accepted.left:
        print(f"tickerwire projector accept-log: {line}", file=sys.stderr)
    return 1 if accepted.left else 0
