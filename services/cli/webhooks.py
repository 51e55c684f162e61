"""``tickerwire webhooks register | list | pause | resume | rotate-secret | remove | replay | test``.

``test`` queues a test event (:func:`..readmodel.webhook_tests.request_test`, the rule the API's
``POST /webhooks/endpoints/{id}/test`` uses too). Each other command but ``list`` publishes the
endpoint's next snapshot (a ``webhook_endpoint`` event,
schemas/models.py) to the access topic, built by :mod:`..readmodel.endpoint_changes` (the partner
API's changes are the same code) from the current state the read model shows, so every process
sees it through the projector and nothing lives in one process's memory. A secret is derived from
the operator's signing key (``services/common/http/signing.py``), shown once when it is made
(``register``, ``rotate-secret``) and never stored, logged or listed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Mapping

import asyncpg

from tickerwire.schemas.models import WebhookEndpointEvent
from tickerwire.schemas.topics import POSTS, topic_name

from ..common.runtime.config import Config
from ..readmodel import endpoint_cap
from ..readmodel.deliveries import webhook_disabled
from ..readmodel.endpoint_changes import (
    Rotation,
    endpoint_filter,
    refuse_target,
    register_event,
    replay_event,
    rotation_event,
    shown_secret,
    status_event,
)
from ..readmodel.replaystart import checked_cursor, since_cursor
from ..readmodel.snapshots import AdminError
from ..readmodel.webhook_tests import TestRefused, request_test
from . import argtypes
from .running import cli_config, publish_one, read_conn, run_admin
from .settings import FullConfig

__all__ = ["delivery_state", "endpoint_filter", "endpoint_lines"]


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


# --------------------------------------------------------------------------- the command


def cmd_webhooks(args: argparse.Namespace) -> int:
    """``webhooks ACTION``: each action but ``list`` publishes the endpoint's next snapshot."""

    async def go() -> int:
        config = cli_config()
        if args.action == "list":
            async with read_conn(config) as conn:
                lines = await endpoint_lines(conn, args.workspace, removed=args.all)
            if lines:
                print("\n".join(lines))
            return 0
        if args.action == "register":
            return await _register(config, args)
        if args.action == "test":
            return await _test(config, args)
        return await _change(config, args)

    return run_admin(f"webhooks {args.action}", go())


async def _register(config: FullConfig, args: argparse.Namespace) -> int:
    filters = {name: endpoint_filter(getattr(args, name), name) for name in ("locales", "tickers", "categories")}
    signing_key = config.signing_key()  # before anything is published: the secret must be shown
    await refuse_target(args.url, opened=config.open_targets())
    async with read_conn(config, read_only=False) as conn:  # the reservation (endpoint_cap.py) is written
        event = await register_event(
            conn,
            workspace_id=args.workspace,
            url=args.url,
            topic=posts_topic(config),
            endpoint_id=args.id,
            description=args.description,
            **filters,
        )
        await endpoint_cap.create(conn, event, lambda e: publish_one(config, e))
    print(f"webhook endpoint id: {event.data.id} (workspace {args.workspace})", file=sys.stderr)
    print(shown_secret(signing_key, event.data.id, 1))  # shown once; derived, never stored
    return 0


async def _test(config: FullConfig, args: argparse.Namespace) -> int:
    async with read_conn(config, read_only=False) as conn:
        queued = await request_test(conn, args.id, None)
    if isinstance(queued, TestRefused):
        raise AdminError(f"webhook endpoint {args.id}: {queued.message}")
    print(queued)
    return 0


async def _changed(
    config: FullConfig, conn: asyncpg.Connection, args: argparse.Namespace
) -> WebhookEndpointEvent | Rotation:
    """The endpoint's next snapshot for ``pause``, ``resume``, ``remove``, ``replay`` or ``rotate-secret``."""
    if args.action == "rotate-secret":
        return await rotation_event(conn, args.id, config.webhooks_rotation_window_s)
    if args.action == "replay":
        topic = posts_topic(config)
        cursor = (
            await checked_cursor(conn, topic, args.start)
            if args.start is not None
            else await since_cursor(config, conn, topic, args.since)
        )
        return await replay_event(conn, args.id, cursor)
    return await status_event(conn, args.id, args.action)


async def _change(config: FullConfig, args: argparse.Namespace) -> int:
    signing_key = config.signing_key() if args.action == "rotate-secret" else None
    async with read_conn(config) as conn:
        changed = await _changed(config, conn, args)
    event = changed.event if isinstance(changed, Rotation) else changed
    await publish_one(config, event)
    if signing_key is not None and isinstance(changed, Rotation):
        until = changed.old_signs_until.isoformat(timespec="seconds")
        print(
            f"webhook endpoint {args.id}: secret generation {event.data.secret_generation}; "
            f"the previous secret also signs until {until}",
            file=sys.stderr,
        )
        print(shown_secret(signing_key, args.id, event.data.secret_generation))  # shown once
    elif args.action == "replay":
        print(f"webhook endpoint {args.id}: replay {event.data.replay_seq} from {event.data.replay_from}")
    else:
        print(f"webhook endpoint {args.id}: {event.data.status} (version {event.version})")
    return 0


def register(sub) -> None:
    hooks = sub.add_parser("webhooks", help="register and manage a workspace's webhook endpoints (docs/webhooks.md)")
    actions = hooks.add_subparsers(dest="action", required=True, metavar="ACTION")
    reg = actions.add_parser(
        "register", help="register an endpoint; prints its id (stderr) and its signing secret, once (stdout)"
    )
    reg.add_argument(
        "--workspace", required=True, type=argtypes.entity_id, help="a workspace the read model already shows"
    )
    reg.add_argument("--url", required=True, help="http(s) URL reaching a public address")
    reg.add_argument("--id", type=argtypes.webhook_id, help="endpoint id (default: whe_ and 24 random hex digits)")
    reg.add_argument(
        "--description",
        type=argtypes.bounded_text(200),
        default="",
        help="a note on the endpoint, at most 200 characters",
    )
    for name, example in (("locales", "en-US,de-DE"), ("tickers", "BTC,ETH"), ("categories", "bitcoin-etfs,defi")):
        reg.add_argument(f"--{name}", help=f"only posts of these {name}, the stream's filter (e.g. {example})")
    ls = actions.add_parser(
        "list",
        help="one line each: id, workspace, status, delivery state, delivered, secret generation, URL, filters",
    )
    ls.add_argument("--workspace", type=argtypes.entity_id, help="only this workspace's endpoints")
    ls.add_argument("--all", action="store_true", help="removed endpoints too")
    for name, what in (
        ("pause", "stop delivering (the position is kept)"),
        ("resume", "deliver again from the kept position; also enables an endpoint the dispatcher disabled"),
        ("remove", "remove the endpoint for good"),
        ("rotate-secret", "a new signing secret, printed once; the previous one also signs for the rotation window"),
        ("test", "send a webhook.test message to the endpoint once; prints its webhook-id"),
    ):
        actions.add_parser(name, help=what).add_argument("id", type=argtypes.webhook_id, help="endpoint id (whe_...)")
    rep = actions.add_parser("replay", help="deliver again everything after a cursor or since a time")
    rep.add_argument("id", type=argtypes.webhook_id, help="endpoint id (whe_...)")
    start = rep.add_mutually_exclusive_group(required=True)
    start.add_argument("--from", dest="start", metavar="CURSOR", help="a resume cursor (c1~...) this read model issued")
    start.add_argument(
        "--since",
        type=argtypes.aware_timestamp,
        metavar="TIME",
        help="what the posts topic received at or after this time (ISO 8601 with offset)",
    )
    hooks.set_defaults(func=cmd_webhooks)
