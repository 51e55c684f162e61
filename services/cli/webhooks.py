"""``tickerwire webhooks register | list | pause | resume | rotate-secret | remove | replay``.

Each command but ``list`` publishes the endpoint's next snapshot (a ``webhook_endpoint`` event,
schemas/models.py) to the access topic, built from the current state the read model shows (read
only, as :mod:`.admin` does for keys and workspaces), so every process sees it through the
projector and nothing lives in one process's memory. A secret is derived from the operator's
signing key (``services/common/http/signing.py``), shown once when it is made (``register``,
``rotate-secret``) and never stored, logged or listed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping

import asyncpg
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from tickerwire.schemas.models import WebhookEndpoint, WebhookEndpointEvent
from tickerwire.schemas.topics import POSTS, topic_name

from ..common import kafka
from ..common.http.signing import derive_secret, secret_text
from ..common.http.targets import TargetRefused, check_url
from ..common.runtime.config import Config
from ..common.runtime.errors import InvalidParameter
from ..readmodel import cursors
from ..readmodel.deliveries import webhook_disabled
from ..readmodel.filters import ENDPOINT_NAMES, parse_filter
from ..readmodel.walk import Refusal, walk
from .admin import AdminError, BadArgument, next_version, now, require_workspace

#: Endpoints a workspace may have that are not removed (``GET /webhooks/endpoints`` lists them all).
MAX_ENDPOINTS_PER_WORKSPACE = 100
#: How long a ``--from`` cursor ahead of the committed frontier is waited for before it is refused.
FROM_CURSOR_WAIT_S = 1.0


def endpoint_filter(raw: str | None, name: str) -> list[str] | None:
    """One filter of an endpoint from its CSV (``--locales``, ``--tickers``, ``--categories``):
    the stream's grammar (docs/api.md#stream: at most 20 items, empty ones skipped, repeats once;
    locales in BCP 47 case, tickers upper-case), each value of the event contract's form. None:
    not given (no restriction). :class:`BadArgument` naming the option otherwise."""
    try:
        values = getattr(parse_filter({name: raw}, ENDPOINT_NAMES, contract=True), name)
    except InvalidParameter as exc:
        raise BadArgument(f"--{name}: {exc.message}") from None
    return list(values) if values is not None else None


def new_endpoint_id() -> str:
    return "whe_" + secrets.token_hex(12)


def shown_secret(signing_key: bytes, endpoint_id: str, generation: int) -> str:
    """The ``whsec_`` secret of one generation, as the command prints it (once)."""
    return secret_text(derive_secret(signing_key, endpoint_id, generation))


async def refuse_target(url: str, *, allow_private: bool) -> None:
    """:class:`BadArgument` naming why, for a URL a webhook may not reach (docs/webhooks.md#endpoints)."""
    try:
        await check_url(url, allow_private=allow_private)
    except TargetRefused as exc:
        hint = "" if allow_private else " (TICKERWIRE_WEBHOOKS_ALLOW_PRIVATE_TARGETS allows non-public addresses)"
        raise BadArgument(f"refused {url[:200]}: {exc}{hint}") from None


# --------------------------------------------------------------------------- positions


async def frontier_cursor(conn: asyncpg.Connection, topic: str) -> str:
    """The read model's current frontier as a cursor: every announcement committed so far is
    below it, so a delivery from it gets exactly what is announced after this instant."""
    page = await walk(conn, topic, None, frozenset(), limit=0)
    assert not isinstance(page, Refusal)  # no cursor, nothing to refuse
    return page.cursor()


async def checked_cursor(conn: asyncpg.Connection, topic: str, token: str) -> str:
    """``token`` when this read model issued it (the walk's rules: its epoch, its partitions,
    nothing past the committed frontier); :class:`BadArgument` for a token that is not a cursor,
    :class:`AdminError` for one of another epoch or that this read model cannot have issued."""
    try:
        cursor = cursors.decode(token)
    except cursors.InvalidCursor:
        raise BadArgument(f"--from: {token[:60]!r} is not a resume cursor (c1~...)") from None
    page = await walk(conn, topic, cursor, frozenset(), limit=0, wait_s=FROM_CURSOR_WAIT_S)
    if isinstance(page, Refusal):
        if page.code == cursors.EPOCH_CHANGED:
            why = "it belongs to an earlier log (the posts log was reset or the read model rebuilt)"
        else:
            why = cursors.not_issued(cursor, page.frontier) or "this read model cannot have issued it"
        raise AdminError(f"--from: refused, {why}")
    return cursor.encode()


async def since_cursor(config: Config, conn: asyncpg.Connection, topic: str, since: datetime) -> str:
    """A cursor from which everything the posts topic received at or after ``since`` is
    delivered again: per partition, the first offset whose record timestamp is at or after it
    (a partition with none: its end), no further than the committed frontier, in the current epoch."""
    head = await walk(conn, topic, None, frozenset(), limit=0)
    assert not isinstance(head, Refusal)
    tps = [TopicPartition(topic, p) for p in sorted(head.frontier)]
    if not tps:  # nothing projected yet: nothing to deliver again
        return head.cursor()
    consumer = kafka.consumer(config, group_id=None, client_id="tickerwire-webhooks-replay")
    try:
        await consumer.start()
        found = await consumer.offsets_for_times({tp: int(since.timestamp() * 1000) for tp in tps})
        ends = await consumer.end_offsets(tps)
    except KafkaError as exc:
        raise kafka.unreachable(config, exc) from exc
    finally:
        await consumer.stop()
    marks: dict[int, cursors.Mark] = {}
    for tp in tps:
        at = found.get(tp)
        offset = at.offset if at is not None else ends[tp]
        marks[tp.partition] = (min(offset, head.frontier[tp.partition]), "")
    return cursors.encode(head.epoch, marks)


# --------------------------------------------------------------------------- snapshots


async def endpoint_row(conn: asyncpg.Connection, endpoint_id: str) -> asyncpg.Record:
    row = await conn.fetchrow("SELECT * FROM webhook_endpoints WHERE id = $1", endpoint_id)
    if row is None:
        raise AdminError(f"no webhook endpoint {endpoint_id} in the read model (`tickerwire webhooks list` shows them)")
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
) -> WebhookEndpointEvent:
    """A new endpoint of an existing workspace, delivering from the read model's frontier."""
    await require_workspace(conn, workspace_id)
    endpoint_id = endpoint_id or new_endpoint_id()
    if await conn.fetchval("SELECT 1 FROM webhook_endpoints WHERE id = $1", endpoint_id):
        raise AdminError(f"webhook endpoint {endpoint_id} already exists")
    count = await conn.fetchval(
        "SELECT count(*) FROM webhook_endpoints WHERE workspace_id = $1 AND status <> 'removed'", workspace_id
    )
    if count >= MAX_ENDPOINTS_PER_WORKSPACE:
        raise AdminError(f"workspace {workspace_id} has {count} endpoints, the most it may have; remove one first")
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
    )
    return _event(data, None)


def _current(row: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot fields of a stored endpoint row."""
    return {
        name: (list(row[name]) if name in ("locales", "tickers", "categories") and row[name] is not None else row[name])
        for name in WebhookEndpoint.model_fields
    }


#: What each status change may follow: a removed endpoint stays removed.
_ACTIONS = {"pause": "paused", "resume": "active", "remove": "removed"}


async def status_event(conn: asyncpg.Connection, endpoint_id: str, action: str) -> WebhookEndpointEvent:
    """``pause``, ``resume`` (which also enables an endpoint the dispatcher disabled) or ``remove``."""
    row = await endpoint_row(conn, endpoint_id)
    if row["status"] == "removed":
        raise AdminError(f"webhook endpoint {endpoint_id} was removed; register a new one")
    return _event({**_current(row), "status": _ACTIONS[action]}, row["version"])


@dataclass(frozen=True, slots=True)
class Rotation:
    event: WebhookEndpointEvent
    #: Until when the previous generation's secret also signs.
    old_signs_until: datetime


async def rotation_event(conn: asyncpg.Connection, endpoint_id: str, window_s: float) -> Rotation:
    row = await endpoint_row(conn, endpoint_id)
    if row["status"] == "removed":
        raise AdminError(f"webhook endpoint {endpoint_id} was removed; register a new one")
    at = now()
    event = _event(
        {**_current(row), "secret_generation": row["secret_generation"] + 1, "rotated_at": at}, row["version"]
    )
    return Rotation(event, at + timedelta(seconds=window_s))


async def replay_event(conn: asyncpg.Connection, endpoint_id: str, cursor: str) -> WebhookEndpointEvent:
    row = await endpoint_row(conn, endpoint_id)
    if row["status"] == "removed":
        raise AdminError(f"webhook endpoint {endpoint_id} was removed; register a new one")
    return _event({**_current(row), "replay_from": cursor, "replay_seq": row["replay_seq"] + 1}, row["version"])


# --------------------------------------------------------------------------- list

_LIST = """
SELECT e.id, e.workspace_id, e.url, e.status, e.version, e.locales, e.tickers, e.categories, e.secret_generation,
       d.state, d.disabled_version, d.disabled_reason, d.delivered, d.attempt, d.failing_since, d.cursor
FROM webhook_endpoints e LEFT JOIN webhook_deliveries d ON d.endpoint_id = e.id
WHERE ($1::text IS NULL OR e.workspace_id = $1) AND ($2 OR e.status <> 'removed')
ORDER BY e.workspace_id, e.created_at, e.id
"""


def _filters_text(row: Mapping[str, Any]) -> str:
    return " ".join(
        f"{name}={','.join(row[name]) if row[name] is not None else '*'}"
        for name in ("locales", "tickers", "categories")
    )


def delivery_state(row: Mapping[str, Any]) -> str:
    """What the dispatcher says of an endpoint: ``disabled (reason)`` while its disabling holds
    (no later version of the endpoint), ``failing since …, attempt N``, ``delivering``, or ``-``
    before the dispatcher has taken it up."""
    if row["state"] is None:
        return "-"
    if webhook_disabled(row):
        return f"disabled ({row['disabled_reason'] or 'no reason given'})"
    if row["failing_since"] is not None:
        return f"failing since {row['failing_since'].isoformat(timespec='seconds')}, attempt {row['attempt']}"
    return "delivering"


async def endpoint_lines(conn: asyncpg.Connection, workspace_id: str | None, *, removed: bool) -> list[str]:
    """One tab-separated line per endpoint: id, workspace, status, the dispatcher's state,
    messages delivered, secret generation, URL, filters. Never a secret."""
    rows = await conn.fetch(_LIST, workspace_id, removed)
    return [
        "\t".join(
            (
                r["id"],
                r["workspace_id"],
                r["status"],
                delivery_state(r),
                f"delivered={r['delivered'] or 0}",
                f"generation={r['secret_generation']}",
                r["url"],
                _filters_text(r),
            )
        )
        for r in rows
    ]


def posts_topic(config: Config) -> str:
    return topic_name(config.topic_prefix, POSTS)
