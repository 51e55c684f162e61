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
    langs = served if conn.filter.langs is None else served & {lang.lower() for lang in conn.filter.langs}
    marks = dict(resume.marks)
    first = True
    while True:
        page = await cursors.read_reaching(
            lambda: cursors.read_changes(
                feed.db,
                feed.topic,
                marks,
                langs,
                tickers=conn.filter.tickers,
                categories=conn.filter.categories,
                limit=RESUME_PAGE,
                upto=start.marks,
            ),
            # Both where the cursor is and where the connection went live must be committed (a
            # failover to an asynchronous standby may have forgotten some of it for a moment).
            cursors.Cursor(resume.epoch, cursors.furthest(resume.marks, start.marks)) if first else None,
        )
        if first:
            first = False
            if (refusal := _refusal(resume, start, page)) is not None:
                metrics.resumes.labels("refused").inc()
                hub.skip_live(conn, None)
                await hub.put(conn, protocol.ready(conn.session_id, start.encode(), False, refusal))
                return
            # Announcements the cursor already holds that the feed has not passed yet are not sent again live.
            hub.skip_live(conn, {p: m for p, m in resume.marks.items() if m > start.mark(p)} or None)
            await hub.put(conn, protocol.ready(conn.session_id, resume.encode(), True))
        for item in page.items:
            cursors.advance(marks, item.partition, (item.offset, item.lang))
            await hub.put(
                conn,
                protocol.post_created(item.lean, item.partition, item.offset, cursors.encode(resume.epoch, marks)),
            )
        metrics.replayed.inc(len(page.items))
        if len(page.items) < RESUME_PAGE:
            metrics.resumes.labels("resumed").inc()
            return


def _refusal(resume: cursors.Cursor, start: cursors.Cursor, page: cursors.Changes) -> tuple[str, str] | None:
    """Why ``resume`` is refused (a cursor of another epoch, or one this read model cannot have
    issued, judged by the frontier read with the replay's first page), or None."""
    if page.epoch != resume.epoch or page.epoch != start.epoch:
        return cursors.EPOCH_CHANGED, cursors.EPOCH_CHANGED_MESSAGE
    if (why := cursors.not_issued(resume, page.frontier)) is not None:
        log.info("resume refused: %s", why)
        return cursors.NOT_ISSUED, cursors.NOT_ISSUED_MESSAGE.format(why=why)
    return None
