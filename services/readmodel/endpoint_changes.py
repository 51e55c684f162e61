"""The changes of a webhook endpoint, for the operator's ``tickerwire webhooks`` and the partner
API alike (docs/webhooks.md#endpoints): each builds the endpoint's next snapshot (a
``webhook_endpoint`` event, schemas/models.py) from the current state the read model shows; the
caller publishes it to the access topic and the projector projects it.

A caller acting for a workspace (the API) passes ``workspace_id``: an endpoint of another
workspace, or a removed one, is then :class:`NotFound`, exactly as an unknown id. A secret is
derived from the signing key (``services/common/http/signing.py``), shown once when it is made
(a registration, a rotation) and never stored, logged or listed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

import asyncpg

from tickerwire.schemas.models import WebhookEndpoint, WebhookEndpointEvent

from ..common.http.signing import derive_secret, secret_text
from ..common.http.targets import OpenTargets, TargetRefused, check_url
from ..common.runtime.errors import InvalidParameter
from .filters import ENDPOINT_NAMES, parse_filter
from .replaystart import frontier_cursor
from .snapshots import AdminError, BadArgument, NotFound, next_version, now, require_workspace

#: The filters of an endpoint, the stream's (docs/api.md#stream).
FILTERS = ("locales", "tickers", "categories")


def endpoint_filter(raw: str | None, name: str, option: str | None = None) -> list[str] | None:
    """One filter of an endpoint from its CSV (``--locales``, ``--tickers``, ``--categories``):
    the stream's grammar (docs/api.md#stream: at most 20 items, empty ones skipped, repeats once;
    locales in BCP 47 case, tickers upper-case), each value of the event contract's form. None:
    not given (no restriction). :class:`BadArgument` naming the option (or ``option``) otherwise."""
    try:
        values = getattr(parse_filter({name: raw}, ENDPOINT_NAMES, contract=True), name)
    except InvalidParameter as exc:
        raise BadArgument(f"{option or '--' + name}: {exc.message}", field=option) from None
    return list(values) if values is not None else None


def new_endpoint_id() -> str:
    return "whe_" + secrets.token_hex(12)


def shown_secret(signing_key: bytes, endpoint_id: str, generation: int) -> str:
    """The ``whsec_`` secret of one generation, as it is shown (once)."""
    return secret_text(derive_secret(signing_key, endpoint_id, generation))


async def refuse_target(url: str, *, opened: OpenTargets, operator: bool = True) -> None:
    """:class:`BadArgument` naming why, for a URL a webhook may not reach (docs/webhooks.md#endpoints);
    for an ``operator``, with the setting that opens addresses."""
    try:
        await check_url(url, opened=opened)
    except TargetRefused as exc:
        hint = f" (opened to webhooks: {opened}; TICKERWIRE_WEBHOOKS_OPEN_TARGETS opens loopback or CIDR ranges)"
        raise BadArgument(f"refused {url[:200]}: {exc}{hint if operator else ''}", field="url") from None


# --------------------------------------------------------------------------- snapshots


async def endpoint_row(conn: asyncpg.Connection, endpoint_id: str, workspace_id: str | None = None) -> asyncpg.Record:
    """The endpoint's row; with ``workspace_id``, only one of that workspace that is not removed."""
    row = await conn.fetchrow("SELECT * FROM webhook_endpoints WHERE id = $1", endpoint_id)
    if workspace_id is not None and (row is None or row["workspace_id"] != workspace_id or row["status"] == "removed"):
        raise NotFound(f"no webhook endpoint {endpoint_id} in workspace {workspace_id}")
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id} in the read model (`tickerwire webhooks list` shows them)")
    return row


def _event(data: dict[str, Any], stored: int | None) -> WebhookEndpointEvent:
    return WebhookEndpointEvent(version=next_version(stored), emitted_at=now(), data=WebhookEndpoint(**data))


async def register_event(
    conn: asyncpg.Connection,
    *,
    workspace_id: str,
    url: str,
    topic: str,
    locales: list[str] | None = None,
    tickers: list[str] | None = None,
    categories: list[str] | None = None,
    endpoint_id: str | None = None,
    description: str = "",
) -> WebhookEndpointEvent:
    """A new endpoint of an existing workspace, delivering from the read model's frontier. The
    caller counts it against the cap (:func:`.endpoint_cap.create`) before publishing it."""
    await require_workspace(conn, workspace_id)
    endpoint_id = endpoint_id or new_endpoint_id()
    if await conn.fetchval("SELECT 1 FROM webhook_endpoints WHERE id = $1", endpoint_id):
        raise AdminError(f"webhook endpoint {endpoint_id} already exists")
    data = dict(
        id=endpoint_id,
        workspace_id=workspace_id,
        url=url,
        locales=locales,
        tickers=tickers,
        categories=categories,
        status="active",
        secret_generation=1,
        start_cursor=await frontier_cursor(conn, topic),
        created_at=now(),
        description=description,
    )
    return _event(data, None)


def _current(row: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot fields of a stored endpoint row."""
    return {
        name: (list(row[name]) if name in FILTERS and row[name] is not None else row[name])
        for name in WebhookEndpoint.model_fields
        if name in row
    }


async def _live_row(conn: asyncpg.Connection, endpoint_id: str, workspace_id: str | None) -> asyncpg.Record:
    row = await endpoint_row(conn, endpoint_id, workspace_id)
    if row["status"] == "removed":
        raise AdminError(f"webhook endpoint {endpoint_id} was removed; register a new one")
    return row


async def update_event(
    conn: asyncpg.Connection, endpoint_id: str, changes: Mapping[str, Any], workspace_id: str | None = None
) -> WebhookEndpointEvent:
    """The endpoint with ``changes`` (any of ``url`` and the filters; a filter set to None: no
    restriction). The caller has checked a new URL against the address rules."""
    row = await _live_row(conn, endpoint_id, workspace_id)
    return _event({**_current(row), **changes}, row["version"])


#: The status each action sets: a removed endpoint stays removed.
_ACTIONS = {"pause": "paused", "resume": "active", "remove": "removed"}


async def status_event(
    conn: asyncpg.Connection, endpoint_id: str, action: str, workspace_id: str | None = None
) -> WebhookEndpointEvent:
    """``pause``, ``resume`` (which also enables an endpoint the dispatcher disabled) or ``remove``."""
    row = await _live_row(conn, endpoint_id, workspace_id)
    return _event({**_current(row), "status": _ACTIONS[action]}, row["version"])


@dataclass(frozen=True, slots=True)
class Rotation:
    event: WebhookEndpointEvent
    #: Until when the previous generation's secret also signs.
    old_signs_until: datetime


async def rotation_event(
    conn: asyncpg.Connection, endpoint_id: str, window_s: float, workspace_id: str | None = None
) -> Rotation:
    row = await _live_row(conn, endpoint_id, workspace_id)
    at = now()
    event = _event(
        {**_current(row), "secret_generation": row["secret_generation"] + 1, "rotated_at": at}, row["version"]
    )
    return Rotation(event, at + timedelta(seconds=window_s))


async def replay_event(
    conn: asyncpg.Connection, endpoint_id: str, cursor: str, workspace_id: str | None = None
) -> WebhookEndpointEvent:
    row = await _live_row(conn, endpoint_id, workspace_id)
    return _event({**_current(row), "replay_from": cursor, "replay_seq": row["replay_seq"] + 1}, row["version"])
