"""A platform team's producer as it comes: Kafka's Java producer with its default settings
(idempotent, ``acks=all``) publishes a post to a running `tickerwire up`, and the partner API
serves it. `up` runs on Apache Kafka; its own demo producers are idempotent
with ``acks=all`` too (services/common/kafka/clients.py), so the demo data and the trickle it
publishes meanwhile go the same way. (One file of its own: two `up`s at once on the same machine
race for the embedded servers' default ports, and xdist runs a file on one worker.)"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import aiohttp
import pytest

from tests.support.events import encode_v2, post_ev
from tests.support.faults import start_up, stop_up, up_ports, wait_up
from tests.support.producers import Raw, active_producers, java_producer
from tickerwire.schemas.models import entity_key
from tickerwire.schemas.topics import POSTS, topic_name

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
]

#: Above the demo's posts and its trickle's (which count up from the demo's newest).
POST_ID = 9_100_001


async def served(info: dict, post_id: int, timeout: float = 60.0) -> dict:
    """``GET /posts/{post_id}`` with the demo key, asked every 1.5 s (the demo workspace allows 60
    requests a minute) until it is served."""
    url = f"{info['base_url']}/posts/{post_id}"
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(url, headers=headers) as resp:
                body = await resp.json()
                if resp.status == 200:
                    return body
            assert resp.status == 404, (resp.status, body)
            assert time.monotonic() < deadline, f"post {post_id} not served within {timeout:.0f} s: {body}"
            await asyncio.sleep(1.5)


def test_a_post_from_kafkas_java_producer_with_its_defaults_is_served():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-java-"))
    run = start_up(state_dir, up_ports())
    try:
        wait_up(run, timeout=180)
        info = run.info
        assert info["broker"] == "apache", info["broker"]
        event = post_ev(POST_ID, title="Published by Kafka's Java producer")
        record = Raw(encode_v2(event), entity_key(event).encode())
        bootstrap, topic = info["kafka_bootstrap_servers"], topic_name(info["topic_prefix"], POSTS)
        before = asyncio.run(active_producers(bootstrap, topic, POSTS.partitions))
        asyncio.run(java_producer(bootstrap, topic, [record]))  # its defaults: no settings given
        after = asyncio.run(active_producers(bootstrap, topic, POSTS.partitions))
        # Idempotent, as its defaults say: the broker keeps the Java producer's id for the partition.
        assert any(producers - before.get(p, set()) for p, producers in after.items()), (before, after)
        post = asyncio.run(served(info, POST_ID))
        assert (post["id"], post["title"]) == (POST_ID, "Published by Kafka's Java producer"), post
    finally:
        assert stop_up(run) == 0
    shutil.rmtree(state_dir)  # passed: a failure keeps its logs
