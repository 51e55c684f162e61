"""What a webhook endpoint's delivery row (``webhook_deliveries``, the dispatcher's) says, read
alike by every reader of it: the dispatcher deciding whether to deliver, the API's partner
JSON (``GET /webhooks/endpoints``) and ``tickerwire webhooks list``."""

from __future__ import annotations

from typing import Any, Mapping


def webhook_disabled(row: Mapping[str, Any]) -> bool:
    """Whether the dispatcher's disabling of an endpoint holds (410, failing too long, a cursor it
    cannot walk): its delivery state is ``disabled`` and no later version of the endpoint (an
    operator's resume) has come since. ``row``: the endpoint's row joined with its delivery row
    (``state``, ``disabled_version`` and ``version``; the delivery columns None before the
    dispatcher has taken the endpoint up)."""
    return row["state"] == "disabled" and (row["disabled_version"] or 0) >= row["version"]
