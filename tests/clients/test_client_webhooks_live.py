"""The Python client's webhook endpoint operations against the real API: a broker, a projector
applying the access topic into a real PostgreSQL read model, and the API with a signing key (no
dispatcher: nothing is sent; every URL is loopback). Each operation's answer decodes into its
typed model, and each refusal the contract names is its typed error."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.support.apps import ReadModel, writable_stack
from tests.support.stack import BASE
from tickerwire.devstack.demo import dataset
from tickerwire_client import (
    AsyncClient,
    CursorEpochChanged,
    IdempotencyKeyReused,
    NotFound,
    ValidationFailed,
    WebhookStatus,
)

HOOK = "http://127.0.0.1:9/client-live"  # loopback; no dispatcher runs


@pytest.fixture
async def clients(fresh_db, kafka_bootstrap, topic_prefix):
    model = ReadModel(fresh_db)
    await model.project(dataset.catalog_events(3, now=datetime.now(timezone.utc), tokens=5))
    mine = await model.provision("ws_client_live", rate_limit_per_minute=100_000, daily_quota=1_000_000)
    other = await model.provision("ws_client_other", rate_limit_per_minute=100_000, daily_quota=1_000_000)
    async with writable_stack(fresh_db, kafka_bootstrap, topic_prefix) as (_, api):
        async with AsyncClient(api.url + BASE, mine) as client, AsyncClient(api.url + BASE, other) as stranger:
            yield client, stranger


async def test_every_endpoint_operation_round_trips_through_the_typed_client(clients):
    client, stranger = clients
    created = await client.create_webhook_endpoint(
        HOOK, description="desk", locales=["en-us"], tickers=["btc"], idempotency_key="client-live-1"
    )
    endpoint = created.endpoint
    assert created.secret.startswith("whsec_") and endpoint.url == HOOK
    assert (endpoint.filters.locales, endpoint.filters.tickers) == (["en-US"], ["BTC"])
    again = await client.create_webhook_endpoint(
        HOOK, description="desk", locales=["en-us"], tickers=["btc"], idempotency_key="client-live-1"
    )
    assert again.endpoint.id == endpoint.id and again.secret == created.secret
    with pytest.raises(IdempotencyKeyReused):
        await client.create_webhook_endpoint(HOOK, description="other", idempotency_key="client-live-1")

    assert [e.id for e in (await client.webhook_endpoints()).endpoints] == [endpoint.id]
    assert (await client.webhook_endpoint(endpoint.id)).description == "desk"
    updated = await client.update_webhook_endpoint(endpoint.id, description="news desk", tickers=None)
    assert updated.description == "news desk" and updated.filters.tickers is None
    assert (await client.pause_webhook_endpoint(endpoint.id)).status == WebhookStatus.PAUSED
    assert (await client.resume_webhook_endpoint(endpoint.id)).status == WebhookStatus.ACTIVE
    rotated = await client.rotate_webhook_secret(endpoint.id)
    assert rotated.secret != created.secret and rotated.endpoint.secret_generation == 2
    queued = await client.send_webhook_test(endpoint.id)
    assert queued.webhook_id.startswith(f"msg_test_{endpoint.id}_")
    assert (await client.webhook_attempts(endpoint.id)).attempts == []  # no dispatcher: none made
    await client.replay_webhook_endpoint(endpoint.id, since=datetime(2026, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(CursorEpochChanged):
        await client.replay_webhook_endpoint(endpoint.id, cursor="c1~0ther~0.1")
    with pytest.raises(ValidationFailed) as refused:
        await client.create_webhook_endpoint("http://10.0.0.1/hook")
    assert refused.value.field == "url"

    # Another workspace's key: the endpoint is not there, whatever the operation.
    assert (await stranger.webhook_endpoints()).endpoints == []
    with pytest.raises(NotFound):
        await stranger.webhook_endpoint(endpoint.id)
    with pytest.raises(NotFound):
        await stranger.delete_webhook_endpoint(endpoint.id)

    await client.delete_webhook_endpoint(endpoint.id)
    assert (await client.webhook_endpoints()).endpoints == []
    with pytest.raises(NotFound):
        await client.webhook_endpoint(endpoint.id)
