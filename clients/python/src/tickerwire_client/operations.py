"""Which method of :class:`~tickerwire_client.AsyncClient` (and of its blocking twin
:class:`~tickerwire_client.Client`, which has the same names) performs each operation of the
contract, by ``operationId``. tests/unit/test_client_operations.py holds the clients to it: every
operation of schemas/openapi.json has a method here and in the TypeScript client's
``OPERATIONS``, and every method named exists."""

from __future__ import annotations

OPERATIONS: dict[str, str] = {
    "listPosts": "posts",
    "getPost": "post",
    "listCategories": "categories",
    "getCategory": "category",
    "listTokens": "tokens",
    "getToken": "token",
    "getSentimentPulse": "sentiment_pulse",
    "listLanguages": "languages",
    "searchPosts": "search",
    "listChanges": "changes",
    "listWebhookEndpoints": "webhook_endpoints",
    "getWebhookEndpoint": "webhook_endpoint",
    "listWebhookAttempts": "webhook_attempts",
    "createWebhookEndpoint": "create_webhook_endpoint",
    "updateWebhookEndpoint": "update_webhook_endpoint",
    "deleteWebhookEndpoint": "delete_webhook_endpoint",
    "pauseWebhookEndpoint": "pause_webhook_endpoint",
    "resumeWebhookEndpoint": "resume_webhook_endpoint",
    "rotateWebhookEndpointSecret": "rotate_webhook_secret",
    "replayWebhookEndpoint": "replay_webhook_endpoint",
    "sendWebhookTestEvent": "send_webhook_test",
}
