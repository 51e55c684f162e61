"""The client library over an API reading from two streaming replicas, one 500 ms behind: it
sends the freshest consistency mark it saw (X-Min-Log-Position) with every read, so no read
answers from older data than one before it, whichever replica serves it."""

from __future__ import annotations

import pytest

from tests.support.events import post_ev
from tests.support.replicas import replicated_cluster, serving_stack
from tests.support.stack import BASE
from tickerwire.services.readmodel.logposition import covers
from tickerwire_client import AsyncClient

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster():
    with replicated_cluster([0, 500]) as (primary, replicas):
        yield primary, replicas


@pytest.fixture(scope="module")
async def replicated(cluster, kafka_bootstrap):
    primary, replicas = cluster
    async with serving_stack(primary, replicas, kafka_bootstrap) as (stack, key):
        yield stack, key


async def test_the_python_client_sends_its_mark_and_never_reads_older(replicated):
    """The client library sends the freshest mark it saw (responses, pushed posts) itself."""
    stack, key = replicated
    ids = list(range(50_001, 50_121))
    marks: list[dict[int, int]] = []
    async with AsyncClient(stack.of("api")[0].url + BASE, key) as client:
        async with stack.publisher() as send:
            for n in range(0, len(ids), 10):
                await send([post_ev(i) for i in ids[n : n + 10]])
                for read in (lambda: client.posts(limit=5), client.sentiment_pulse, client.tokens):
                    meta = (await read()).meta
                    assert meta is not None
                    marks.append(dict(meta.log_position.offsets) if meta.log_position else {})
    older = [
        (n, earlier, later) for n, (earlier, later) in enumerate(zip(marks, marks[1:])) if not covers(later, earlier)
    ]
    assert len(marks) == 36 and older == []
