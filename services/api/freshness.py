"""Monotonic reads: a client's ``X-Min-Log-Position`` (the ``X-Log-Position`` it last saw, or a
pushed post's ``log_position``) makes the API answer from data at least that fresh.

Statements go to a replica whose stored positions are at or past the mark, else to the primary
(:class:`..common.db.replicas.ReplicaReader`); a page cached at an older mark is not served; an
answer from the in-memory catalog waits (bounded) for a refresh that reads the primary's
current mark. Without the header, nothing here runs.
"""

from __future__ import annotations

from aiohttp import web

from ..common.http.envelope import ApiError
from ..readmodel.logposition import LogPosition
from .state import CATALOG, MIN_LOG_POSITION, WATCHER

MIN_LOG_POSITION_HEADER = "X-Min-Log-Position"
#: How long an answer from memory waits for the catalog to be refreshed past the client's mark.
CATALOG_WAIT_S = 1.0


async def honour(request: web.Request) -> None:
    """Record the request's mark (a 422 when it is not one) and, when the catalog's mark is older,
    have the catalog refreshed first (a 503 when that does not happen within ``CATALOG_WAIT_S``)."""
    raw = request.headers.get(MIN_LOG_POSITION_HEADER)
    if raw is None:
        return
    try:
        want = LogPosition.parse(raw)
    except ValueError as exc:
        raise ApiError(
            422, "VALIDATION_FAILED", f"{MIN_LOG_POSITION_HEADER}: {exc}", field=MIN_LOG_POSITION_HEADER
        ) from None
    if not want:
        return
    request[MIN_LOG_POSITION] = want
    catalog = request.app[CATALOG]
    if catalog.log_position.covers(want):
        return
    await request.app[WATCHER].refreshed_now(CATALOG_WAIT_S)
    if not catalog.log_position.covers(want):
        raise ApiError(
            503,
            "SERVICE_UNAVAILABLE",
            f"No data as fresh as the {MIN_LOG_POSITION_HEADER} sent is available yet; retry shortly.",
            retry_after_sec=1,
        )


def fresh_enough(request: web.Request, mark: LogPosition) -> bool:
    """Whether data at ``mark`` may answer this request (always, without the header)."""
    want = request.get(MIN_LOG_POSITION)
    return want is None or mark.covers(want)
