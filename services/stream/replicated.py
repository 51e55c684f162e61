"""Read-your-stream across replicas: a ``post.created`` is pushed only once every replica the
API may read it from holds it, so a ``GET /posts/{id}`` on receipt answers 200 through any of
them.

The stream watches the same replicas as the API (``TICKERWIRE_DATABASE_READ_URLS``) with a wider
rotation (:data:`LEAVE_FACTOR` and :data:`REJOIN_FACTOR` of ``replica_max_lag_s``, against the
API's 1 and 1/4): a replica the API may read from is one the stream waits for. A replica that
lags past the stream's bound leaves its rotation and stops holding the stream back; the API
stopped reading from it earlier. Without replicas, nothing here runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Iterable

from ..common.db.replicas import POLL_S, Replicas
from ..readmodel import positions
from ..readmodel.logposition import covers

log = logging.getLogger(__name__)

LEAVE_FACTOR = 1.5
REJOIN_FACTOR = 0.5


def stream_replicas(config, topic: str, registry) -> Replicas:
    return Replicas(
        config,
        topic,
        positions_sql=positions.marks_array_sql("$1"),
        covers=covers,
        leave_after_s=config.replica_max_lag_s * LEAVE_FACTOR,
        rejoin_below_s=config.replica_max_lag_s * REJOIN_FACTOR,
        registry=registry,
        reads=False,
    )


async def replicated(replicas: Replicas, records: Iterable[tuple[int, int]]) -> None:
    """Return once every replica in rotation has stored positions past these (partition, offset)
    records (their posts are committed there), or once none that has not is left in rotation;
    at the latest after twice the stream's lag bound (then with a WARNING)."""
    want: dict[int, int] = {}
    for partition, offset in records:
        want[partition] = max(want.get(partition, 0), offset + 1)
    deadline = time.monotonic() + 2 * replicas.leave_after_s
    while True:
        behind = [r for r in replicas.rotation() if not covers(r.marks, want)]
        if not behind:
            return
        await asyncio.gather(*(replicas.ask(r) for r in behind))
        if all(covers(r.marks, want) for r in behind if r.in_rotation):
            return
        if time.monotonic() > deadline:
            log.warning(
                "announcing posts that replica(s) %s have not replayed after %.1f s",
                ", ".join(r.name for r in behind),
                2 * replicas.leave_after_s,
            )
            return
        await asyncio.sleep(POLL_S)
