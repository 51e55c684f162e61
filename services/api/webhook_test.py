"""``POST /webhooks/endpoints/{id}/test`` (schemas/openapi.json#/paths/~1webhooks~1endpoints~1{id}~1test):
a test event queued for one of the caller's endpoints (docs/webhooks.md#test-events). The rule
is :func:`..readmodel.webhook_tests.request_test`, shared with ``tickerwire webhooks test``."""

from __future__ import annotations

import orjson
from aiohttp import web

from ..common.db import storage_errors
from ..common.http.envelope import ApiError
from ..common.http.requestlog import WORKSPACE_KEY
from ..readmodel.webhook_tests import TestRefused, request_test
from .errors import not_found
from .handlers import (
    NO_WEBHOOK_ENDPOINT,
    _endpoint_id as endpoint_id_of,  # the one parse of {id}; kept private for the merge
    json_bytes,
)
from .state import CONFIG, POOL


async def send_webhook_test(request: web.Request) -> web.Response:
    endpoint_id = endpoint_id_of(request)
    if request.body_exists and request.content_length != 0:
        raise ApiError(400, "VALIDATION_FAILED", "This operation takes no request body.")
    with storage_errors("queue a webhook test event"):
        async with request.app[POOL].acquire(timeout=request.app[CONFIG].db_acquire_timeout_s) as conn:
            queued = await request_test(conn, endpoint_id, request[WORKSPACE_KEY])
    if isinstance(queued, TestRefused):
        if queued.code == "not_found":
            raise not_found(NO_WEBHOOK_ENDPOINT)
        raise ApiError(409, "INVALID_STATE", queued.message)
    response = json_bytes(orjson.dumps({"webhook_id": queued}), cache="no-store")
    response.set_status(202)
    return response
