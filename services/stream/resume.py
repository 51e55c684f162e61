"""A resume's replay (docs/resume.md): a connection that opened with ``resume=<cursor>`` first
gets, from the read model, every announcement after its cursor that its filter admits, up to
where it went live; then the live messages its hub held meanwhile.

The cursor is judged by the read model's rules, as ``GET /changes`` judges it: one of another
epoch (:data:`..readmodel.cursors.EPOCH_CHANGED`) or one this read model cannot have issued
(:data:`..readmodel.cursors.NOT_ISSUED`) is refused in ``ready`` (``resumed: false`` with that
code and message), and the connection goes on live from where it started.
"""

from __future__ import annotations

import logging

from ..common.db import storage_errors
from ..common.runtime.errors import StorageUnavailable
from ..readmodel import cursors
from ..readmodel.taxonomy import served_locales
from ..readmodel.walk import Refusal, walk
from . import protocol
from .feed import Feed
from .hub import Connection, Hub
from .metrics import StreamMetrics

log = logging.getLogger(__name__)

#: Announcements read per query of a resume's replay.
RESUME_PAGE = 1_000


async def replay(
    hub: Hub, feed: Feed, metrics: StreamMetrics, conn: Connection, resume: cursors.Cursor, start: cursors.Cursor
) -> None:
    """Replay from the read model every announcement after ``resume`` up to ``start`` (where the
    connection went live) that its filter admits, then the live messages held meanwhile.
    ``ready`` says whether it resumed; a cursor of another epoch is refused (``resumed: false``)
    and the connection goes on live from ``start``."""
    try:
        with storage_errors("resume"):
            await _replay_pages(hub, feed, metrics, conn, resume, start)
        await hub.go_live(conn)
    except StorageUnavailable:
        log.warning("resume failed: the read model is unavailable", extra={"fields": {"session_id": conn.session_id}})
        hub.close(conn, protocol.CLOSE_TRY_AGAIN_LATER, protocol.RESUME_FAILED_REASON)


async def _replay_pages(
    hub: Hub, feed: Feed, metrics: StreamMetrics, conn: Connection, resume: cursors.Cursor, start: cursors.Cursor
) -> None:
    """``ready``, then the replayed announcements, a page at a time (each waiting for room in the
    connection's queue); only ``ready`` when the cursor is refused."""
    served = await served_locales(feed.db)
    at = resume
    while True:
        page = await walk(
            feed.db,
            feed.topic,
            at,
            served,
            limit=RESUME_PAGE,
            filter=conn.filter,
            upto=start,
        )
        if isinstance(page, Refusal):
            if at is not resume:  # the read model changed its epoch under the replay: start again
                raise StorageUnavailable(f"resume: {page.code} in the middle of a replay")
            log.info("resume refused: %s", page.message)
            metrics.resumes.labels("refused").inc()
            hub.skip_live(conn, None)
            await hub.put(conn, protocol.ready(conn.session_id, start.encode(), False, (page.code, page.message)))
            return
        if at is resume:
            # Announcements the cursor already holds that the feed has not passed yet are not sent again live.
            hub.skip_live(conn, {p: m for p, m in resume.marks.items() if m > start.mark(p)} or None)
            await hub.put(conn, protocol.ready(conn.session_id, resume.encode(), True))
        for item, cursor in page.each():
            key = (item.partition, item.offset, item.lang)
            await hub.put(conn, protocol.post_created(item.lean, item.partition, item.offset, cursor), key, page.epoch)
        metrics.replayed.inc(len(page.items))
        if not page.has_more:
            metrics.resumes.labels("resumed").inc()
            return
        at = cursors.Cursor(resume.epoch, page.marks)
