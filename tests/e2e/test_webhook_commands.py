"""The operator's webhook commands (`tickerwire webhooks ...`), run as real processes against the
real broker and a real projector: what they refuse (one line, a status, nothing published), the
secret shown once, and every change reaching rm.webhook_endpoints through the projector."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import ServiceStack, started_stack
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common.http.signing import derive_secret, parse_signing_key, secret_text
from tickerwire.services.readmodel import cursors

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).parents[2] / "schemas" / "examples" / "events.jsonl"
SIGNING_KEY = base64.b64encode(bytes(range(32))).decode()
PUBLIC_URL = "https://93.184.215.14/hooks/tickerwire"  # a public address literal: no DNS needed


def webhooks(stack: ServiceStack, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", "webhooks", *args],
        env={**stack.env(TICKERWIRE_WEBHOOKS_SIGNING_KEY=SIGNING_KEY), "TICKERWIRE_STATE_DIR": "/nonexistent", **env},
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )


def register(url: str, *more: str) -> list[str]:
    return ["register", "--workspace", "ws_hooks", "--url", url, *more]


async def endpoint(stack: ServiceStack, endpoint_id: str):
    await stack.wait_projected()
    conn = await stack.read_conn()
    try:
        return await conn.fetchrow("SELECT * FROM webhook_endpoints WHERE id = $1", endpoint_id)
    finally:
        await conn.close()


async def frontier(stack: ServiceStack) -> tuple[str, dict[int, int]]:
    conn = await stack.read_conn()
    try:
        epoch = await conn.fetchval("SELECT epoch FROM log_epoch")
        rows = await conn.fetch(
            "SELECT partition, next_offset FROM positions WHERE topic = $1",
            topic_name(stack.topic_prefix, POSTS),
        )
        return epoch, {r["partition"]: r["next_offset"] for r in rows}
    finally:
        await conn.close()


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, "whcli", services=("projector",)) as s:
        published = subprocess.run(
            [sys.executable, "-m", "tickerwire.services.cli.main", "publish", str(EXAMPLES)],
            env={**s.env(), "TICKERWIRE_STATE_DIR": "/nonexistent"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert published.returncode == 0, published.stderr
        created = subprocess.run(
            [sys.executable, "-m", "tickerwire.services.cli.main", "workspace", "create", "ws_hooks"],
            env={**s.env(), "TICKERWIRE_STATE_DIR": "/nonexistent"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        await s.wait_projected()
        yield s


@pytest.mark.parametrize(
    ("url", "why", "opens"),
    [
        ("http://127.0.0.1:9/hook", "a loopback address", "loopback"),
        # A CIDR range, within loopback: nothing registered here ever points beyond 127.0.0.0/8.
        ("http://127.0.0.2:9/hook", "a loopback address", "127.0.0.0/30"),
    ],
)
async def test_a_non_public_url_is_refused_unless_the_operator_opens_it(stack, url, why, opens):
    before = await stack.log_size()
    refused = await asyncio.to_thread(webhooks, stack, *register(url))
    assert refused.returncode == 2 and not refused.stdout, refused
    assert len(refused.stderr.splitlines()) == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("tickerwire webhooks register: refused ") and why in refused.stderr
    assert await stack.log_size() == before  # nothing was published
    allowed = await asyncio.to_thread(webhooks, stack, *register(url), TICKERWIRE_WEBHOOKS_OPEN_TARGETS=opens)
    assert allowed.returncode == 0, allowed.stderr
    endpoint_id = allowed.stderr.split("webhook endpoint id: ", 1)[1].split()[0]
    row = await endpoint(stack, endpoint_id)
    assert row is not None and row["url"] == url and row["status"] == "active"


@pytest.mark.parametrize(
    ("opens", "why"), [("169.254.0.0/16", "cloud metadata address"), ("0.0.0.0/0", "never every address")]
)
async def test_the_metadata_address_and_every_address_are_never_opened(stack, opens, why):
    before = await stack.log_size()
    env = {"TICKERWIRE_WEBHOOKS_OPEN_TARGETS": opens}
    refused = await asyncio.to_thread(webhooks, stack, *register("http://169.254.169.254/latest/meta-data/"), **env)
    assert refused.returncode != 0 and not refused.stdout, refused
    assert len(refused.stderr.splitlines()) == 1 and "TICKERWIRE_WEBHOOKS_OPEN_TARGETS" in refused.stderr
    assert why in refused.stderr and "Traceback" not in refused.stderr
    assert await stack.log_size() == before


async def test_the_replaced_allow_everything_setting_stops_the_command(stack):
    refused = await asyncio.to_thread(
        webhooks, stack, *register("http://127.0.0.1:9/hook"), TICKERWIRE_WEBHOOKS_ALLOW_PRIVATE_TARGETS="true"
    )
    assert refused.returncode != 0 and len(refused.stderr.splitlines()) == 1, refused
    assert "was replaced by TICKERWIRE_WEBHOOKS_OPEN_TARGETS" in refused.stderr


async def test_register_shows_the_secret_once_and_every_change_reaches_the_read_model(stack):
    epoch, committed = await frontier(stack)
    assert committed and sum(committed.values()) > 0  # the examples' posts are projected
    done = await asyncio.to_thread(
        webhooks,
        stack,
        *register(PUBLIC_URL, "--id", "whe_lifecycle01", "--locales", "en-us,de-DE,en-US", "--tickers", "btc,ETH"),
    )
    assert done.returncode == 0, done.stderr
    key = parse_signing_key(SIGNING_KEY)
    first = secret_text(derive_secret(key, "whe_lifecycle01", 1))
    assert done.stdout == first + "\n"  # the secret alone, once
    assert "webhook endpoint id: whe_lifecycle01" in done.stderr and first not in done.stderr
    row = await endpoint(stack, "whe_lifecycle01")
    assert (row["workspace_id"], row["url"], row["status"], row["secret_generation"]) == (
        "ws_hooks",
        PUBLIC_URL,
        "active",
        1,
    )
    assert (row["locales"], row["tickers"], row["categories"]) == (["en-US", "de-DE"], ["BTC", "ETH"], None)
    start = cursors.decode(row["start_cursor"])  # delivery starts at the frontier when it was registered
    assert start.epoch == epoch and start.marks == {p: (o, "") for p, o in committed.items()}

    listed = await asyncio.to_thread(webhooks, stack, "list", "--workspace", "ws_hooks")
    assert listed.returncode == 0, listed.stderr
    line = next(l for l in listed.stdout.splitlines() if l.startswith("whe_lifecycle01\t"))
    assert line.split("\t")[:6] == ["whe_lifecycle01", "ws_hooks", "active", "-", "delivered=0", "generation=1"]
    assert "whsec_" not in listed.stdout and first not in listed.stdout

    for action, status in (("pause", "paused"), ("resume", "active")):
        changed = await asyncio.to_thread(webhooks, stack, action, "whe_lifecycle01")
        assert changed.returncode == 0 and f"whe_lifecycle01: {status}" in changed.stdout, changed.stderr
        assert (await endpoint(stack, "whe_lifecycle01"))["status"] == status

    rotated = await asyncio.to_thread(webhooks, stack, "rotate-secret", "whe_lifecycle01")
    assert rotated.returncode == 0, rotated.stderr
    second = secret_text(derive_secret(key, "whe_lifecycle01", 2))
    assert rotated.stdout == second + "\n" and second != first
    assert "secret generation 2" in rotated.stderr and "previous secret also signs until" in rotated.stderr
    row = await endpoint(stack, "whe_lifecycle01")
    assert row["secret_generation"] == 2 and row["rotated_at"] is not None

    replayed = await asyncio.to_thread(webhooks, stack, "replay", "whe_lifecycle01", "--from", row["start_cursor"])
    assert replayed.returncode == 0, replayed.stderr
    row = await endpoint(stack, "whe_lifecycle01")
    assert (row["replay_seq"], row["replay_from"]) == (1, row["start_cursor"])

    since = await asyncio.to_thread(webhooks, stack, "replay", "whe_lifecycle01", "--since", "2000-01-01T00:00:00Z")
    assert since.returncode == 0, since.stderr
    row = await endpoint(stack, "whe_lifecycle01")
    # Every record of the posts topic is newer: each partition from its first offset.
    assert row["replay_seq"] == 2 and cursors.decode(row["replay_from"]) == cursors.Cursor(
        epoch, {p: (0, "") for p in committed}
    )
    later = await asyncio.to_thread(webhooks, stack, "replay", "whe_lifecycle01", "--since", "2999-01-01T00:00:00Z")
    assert later.returncode == 0, later.stderr
    row = await endpoint(stack, "whe_lifecycle01")
    # Nothing is newer: each partition from its end (the committed frontier).
    assert row["replay_seq"] == 3 and cursors.decode(row["replay_from"]).marks == start.marks

    removed = await asyncio.to_thread(webhooks, stack, "remove", "whe_lifecycle01")
    assert removed.returncode == 0, removed.stderr
    assert (await endpoint(stack, "whe_lifecycle01"))["status"] == "removed"
    assert "whe_lifecycle01" not in (await asyncio.to_thread(webhooks, stack, "list")).stdout
    assert "whe_lifecycle01\tws_hooks\tremoved" in (await asyncio.to_thread(webhooks, stack, "list", "--all")).stdout
    again = await asyncio.to_thread(webhooks, stack, "resume", "whe_lifecycle01")
    assert again.returncode == 1 and "was removed" in again.stderr


async def test_every_refusal_is_one_line_a_status_and_nothing_published(stack):
    epoch, committed = await frontier(stack)
    ahead = cursors.encode(epoch, {p: (o + 1000, "") for p, o in committed.items()})
    ok = register(PUBLIC_URL)
    cases = [
        (["register", "--workspace", "ws_nobody", "--url", PUBLIC_URL], {}, 1, "no workspace ws_nobody"),
        (ok, {"TICKERWIRE_WEBHOOKS_SIGNING_KEY": ""}, 2, "TICKERWIRE_WEBHOOKS_SIGNING_KEY"),
        ([*ok, "--locales", "en_US"], {}, 2, "--locales"),
        ([*ok, "--tickers", ",".join(f"T{i}" for i in range(21))], {}, 2, "--tickers"),
        (["register", "--workspace", "ws_hooks", "--url", "ftp://example.com/x"], {}, 2, "http:// or https://"),
        (["pause", "whe_nobody01"], {}, 1, "no webhook endpoint whe_nobody01"),
        (["pause", "nope"], {}, 2, "webhook endpoint id"),
        (["replay", "whe_nobody01", "--from", "c1~X"], {}, 2, "not a resume cursor"),
        (["replay", "whe_nobody01", "--from", "c1~0ther~0.1"], {}, 1, "earlier log"),
        (["replay", "whe_nobody01", "--from", ahead], {}, 1, "past the committed log position"),
        (["replay", "whe_nobody01", "--since", "yesterday"], {}, 2, "--since"),
        (["replay", "whe_nobody01"], {}, 2, "one of the arguments --from --since is required"),
    ]
    before = await stack.log_size()
    for args, env, status, word in cases:
        result = await asyncio.to_thread(webhooks, stack, *args, **env)
        lines = result.stderr.splitlines()
        assert (result.returncode, len(lines)) == (status, 1), (args, result.returncode, result.stderr)
        assert word in lines[0] and not result.stdout, (args, result.stderr)
    assert await stack.log_size() == before
