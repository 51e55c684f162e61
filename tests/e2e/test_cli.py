"""The platform teams' CLI: validated publishing (all or nothing) and admin commands, run as
real `tickerwire` processes against the real broker and a real projector."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import orjson
import pytest

from tests.support.events import encode_event, fresh_post_ev
from tests.support.producers import active_producers
from tests.support.stack import ServiceStack, started_stack
from tickerwire.devstack.embedded.ports import free_port
from tickerwire.schemas.topics import ALL_TOPICS, POSTS, topic_name
from tickerwire.services.common import kafka
from tickerwire.services.common.db.command import COMMAND_LOCK_TIMEOUT_S
from tickerwire.services.readmodel.migrate import MIGRATION_LOCK

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).parents[2] / "schemas" / "examples" / "events.jsonl"


def cli(stack: ServiceStack, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", *args],
        env={**stack.env(), "TICKERWIRE_STATE_DIR": "/nonexistent"},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, "clitest", services=("projector",)) as s:
        yield s


async def test_a_file_with_an_invalid_line_publishes_nothing(stack, tmp_path):
    lines = EXAMPLES.read_text().splitlines()
    bad = lines[:2] + ['{"type": "post", "version": 1}', "not json"] + lines[2:]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(bad) + "\n")
    before = await stack.log_size()
    result = cli(stack, "publish", str(path))
    assert result.returncode == 1
    assert f"{path}:3: post:" in result.stderr
    assert f"{path}:4: not valid UTF-8 JSON" in result.stderr
    assert "nothing was published" in result.stderr
    assert await stack.log_size() == before


async def test_valid_file_from_stdin_is_published_and_projected(stack):
    result = cli(stack, "publish", "-", stdin=EXAMPLES.read_text())
    assert result.returncode == 0, result.stderr
    lines = len([line for line in EXAMPLES.read_text().splitlines() if line.strip()])
    assert f"published {lines} event(s)" in result.stdout
    await stack.wait_projected()
    conn = await stack.read_conn()
    try:
        assert await conn.fetchval("SELECT count(*) FROM post_translations WHERE post_id = 9001") == 1
        assert await conn.fetchval("SELECT name FROM tokens WHERE ticker = 'BTC'") == "Bitcoin"
    finally:
        await conn.close()


async def test_publish_is_an_idempotent_producer_with_acks_all_on_apache_kafka(stack):
    """`tickerwire publish` completes on Apache Kafka as an idempotent producer: the broker keeps
    its producer id for the partition it wrote (a producer without idempotence leaves none)."""
    topic = topic_name(stack.topic_prefix, POSTS)
    before = await active_producers(stack.kafka_bootstrap, topic, POSTS.partitions)
    event = fresh_post_ev(9101)
    result = cli(stack, "publish", "-", stdin=encode_event(event).decode())
    assert result.returncode == 0, result.stderr
    assert "published 1 event(s)" in result.stdout
    after = await active_producers(stack.kafka_bootstrap, topic, POSTS.partitions)
    new = {(p, producer) for p, producers in after.items() for producer in producers - before.get(p, set())}
    assert len(new) == 1, (before, after)  # the command's one producer, on the one partition it wrote
    await stack.wait_projected()
    conn = await stack.read_conn()
    try:
        assert await conn.fetchval("SELECT version FROM posts WHERE id = 9101") == 1
    finally:
        await conn.close()


async def test_publishing_to_a_broker_without_the_topics_creates_them_as_declared_first(stack):
    # Else the broker creates the topic on demand with its own settings (a delete policy, its
    # default partitions), which a rebuild cannot use and a partition count cannot undo.
    prefix = f"fresh{time.monotonic_ns() % 10**9}"
    config = dataclasses.replace(stack.config, topic_prefix=prefix)
    assert len(await kafka.check_topics(config)) == len(ALL_TOPICS)  # none of them exists yet
    result = subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", "publish", str(EXAMPLES)],
        env={**stack.env(), "TICKERWIRE_STATE_DIR": "/nonexistent", "TICKERWIRE_TOPIC_PREFIX": prefix},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert await kafka.check_topics(config) == []
    assert f"created topic {prefix}." in result.stderr


async def test_admin_commands_publish_snapshots_and_never_print_hashes(stack):
    assert cli(stack, "workspace", "create", "ws_cli", "--name", "CLI Co", "--rate-limit", "120").returncode == 0
    await stack.wait_projected()
    issued = cli(stack, "key", "issue", "ws_cli", "--id", "key_cli")
    assert issued.returncode == 0, issued.stderr
    key = issued.stdout.strip()
    assert key.startswith("tw_live_") and len(key) > 40
    assert cli(stack, "embed", "bdg_cli00001", "ws_cli").returncode == 0
    await stack.wait_projected()  # a heartbeat needs its embed in the read model
    assert cli(stack, "heartbeat", "bdg_cli00001", "ws_cli", "--landed-at", "2026-01-01T00:00:00Z").returncode == 0
    assert cli(stack, "workspace", "suspend", "ws_cli").returncode == 0
    await stack.wait_projected()
    swept = cli(stack, "sweep")
    assert swept.returncode == 0 and "ws_cli\tmissing" in swept.stdout
    assert cli(stack, "key", "revoke", "key_cli").returncode == 0
    await stack.wait_projected()
    conn = await stack.read_conn()
    try:
        ws = await conn.fetchrow("SELECT * FROM workspaces WHERE id = 'ws_cli'")
        assert (ws["name"], ws["status"], ws["rate_limit_per_minute"]) == ("CLI Co", "suspended", 120)
        k = await conn.fetchrow("SELECT * FROM api_keys WHERE id = 'key_cli'")
        assert k["revoked_at"] is not None and k["display_prefix"] == key[:12]
        assert key not in str(dict(k))
    finally:
        await conn.close()
    assert cli(stack, "workspace", "suspend", "ws_nobody").returncode == 1


async def test_a_migration_behind_a_held_lock_gives_up_with_one_line(stack):
    """``tickerwire migrate`` queued behind another session's lock (here the migration lock, held
    by a transaction that does not end) gives up after the lock bound, says so in one line and
    exits 1, instead of waiting for ever (and keeping every later reader of the table waiting)."""
    holder = await asyncpg.connect(stack.database_url)
    try:
        async with holder.transaction():
            await holder.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            started = time.monotonic()
            done = await asyncio.to_thread(cli, stack, "migrate")
            waited = time.monotonic() - started
    finally:
        await holder.close()
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert (
        f"gave up after waiting {COMMAND_LOCK_TIMEOUT_S:g} s for a lock" in done.stderr
        and "nothing was changed" in done.stderr
    )
    assert COMMAND_LOCK_TIMEOUT_S <= waited < COMMAND_LOCK_TIMEOUT_S + 20
    assert cli(stack, "migrate").returncode == 0  # the lock released: it runs


def test_missing_configuration_fails_loudly():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKERWIRE_")}
    result = subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", "api"],
        env={**env, "TICKERWIRE_STATE_DIR": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "TICKERWIRE_DATABASE_URL is required" in result.stderr


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", *args],
        env={**env, "TICKERWIRE_STATE_DIR": "/nonexistent"},
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_every_bad_argument_setting_or_dependency_is_one_line_and_a_status(stack):
    """The issue's cases and their kin: one line on stderr (what was wrong, what to do), status
    2 for usage and 1 for runtime, never a traceback, and nothing published."""
    assert cli(stack, "workspace", "create", "ws_known").returncode == 0
    await stack.wait_projected()
    nowhere = f"127.0.0.1:{free_port()}"
    no_pg = {**stack.env(), "TICKERWIRE_DATABASE_URL": f"postgresql://postgres@{nowhere}/tickerwire"}
    no_broker = {**stack.env(), "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": nowhere}
    ok = stack.env()
    cases = [
        # (environment, arguments, status, a word the line must hold)
        (ok, ["embed", "bdg_acc", "ws_known"], 2, "embed id"),
        (ok, ["embed", "bad_id", "ws_known"], 2, "embed id"),
        (ok, ["workspace", "create", "bad id"], 2, "not a valid id"),  # not just "id": "invalid" holds it
        (ok, ["workspace", "update", "ws_known", "--rate-limit", "-5"], 2, "--rate-limit"),
        (ok, ["workspace", "update", "ws_known", "--daily-quota", "0"], 2, "--daily-quota"),
        (ok, ["workspace", "update", "ws_known", "--stream-connections", "x"], 2, "--stream-connections"),
        (ok, ["heartbeat", "bdg_known01", "ws_known", "--landed-at", "yesterday"], 2, "--landed-at"),
        (ok, ["heartbeat", "bdg_known01", "ws_known", "--landed-at", "2999-01-01T00:00:00Z"], 2, "future"),
        (ok, ["heartbeat", "bdg_known01", "ws_known", "--landed-at", "2026-01-01T00:00:00"], 2, "offset"),
        (ok, ["key", "issue", "ws_nobody"], 1, "no workspace ws_nobody"),
        (ok, ["embed", "bdg_nobody01", "ws_nobody"], 1, "no workspace ws_nobody"),
        (ok, ["heartbeat", "bdg_nobody01", "ws_known"], 1, "no embed bdg_nobody01"),
        (ok, ["key", "revoke", "key_nobody"], 1, "no key"),
        (ok, ["workspace", "suspend", "ws_nobody"], 1, "no workspace"),
        (ok, ["nonsense"], 2, "invalid choice"),
        (ok, ["publish", "/nonexistent/events.jsonl"], 2, "cannot read"),
        ({**ok, "TICKERWIRE_API_PORT": "abc"}, ["api"], 2, "TICKERWIRE_API_PORT"),
        ({**ok, "TICKERWIRE_API_PORT": "abc"}, ["up"], 2, "TICKERWIRE_API_PORT"),
        ({**ok, "TICKERWIRE_MAX_CONNECTIONS": "0"}, ["stream"], 2, "TICKERWIRE_MAX_CONNECTIONS"),
        ({**ok, "TICKERWIRE_LOG_LEVEL": "loud"}, ["sweep"], 2, "TICKERWIRE_LOG_LEVEL"),
        (ok, ["up", "--api-port", "http"], 2, "--api-port"),
        (ok, ["schemas", "export", "--out", "/proc/tickerwire-nowhere"], 1, "cannot write"),
    ]
    for args in (
        ["workspace", "create", "ws_x"],
        ["workspace", "update", "ws_known"],
        ["key", "issue", "ws_known"],
        ["key", "revoke", "key_x"],
        ["embed", "bdg_x0001", "ws_known"],
        ["heartbeat", "bdg_x0001", "ws_known"],
        ["sweep"],
        ["migrate"],
        ["projector", "rebuild"],
    ):
        cases.append((no_pg, args, 1, "PostgreSQL" if args[0] != "projector" else "connect"))
    for args in (["workspace", "create", "ws_y"], ["key", "issue", "ws_known"], ["embed", "bdg_y0001", "ws_known"]):
        cases.append((no_broker, args, 1, "broker"))
    cases.append((no_broker, ["publish", "-"], 1, "broker"))
    # A server that answers but refuses for good, and URLs no connection could use (before: a
    # traceback, or retries forever for a URL no retry can fix).
    no_db = {**ok, "TICKERWIRE_DATABASE_URL": _with_database(ok["TICKERWIRE_DATABASE_URL"], "nosuchdb")}
    for args in (["migrate"], ["sweep"], ["projector", "rebuild"], ["projector", "accept-log"]):
        cases.append((no_db, args, 1, '"nosuchdb" does not exist'))
    for url, word in (
        ("mysql://x@127.0.0.1/t", "postgresql://"),
        ("postgresql://x@127.0.0.1:http/t", "invalid port"),
        (ok["TICKERWIRE_DATABASE_URL"] + "?sslmode=bogus", "sslmode"),
    ):
        for args in (["migrate"], ["projector", "rebuild"], ["projector", "accept-log"]):
            cases.append(({**ok, "TICKERWIRE_DATABASE_URL": url}, args, 2, word))
    before = await stack.log_size()
    slots = asyncio.Semaphore(4)

    async def run(env, args):
        async with slots:
            return await asyncio.to_thread(run_cli, env, *args)

    results = await asyncio.gather(*(run(env, args) for env, args, _, _ in cases))
    for (env, args, status, word), result in zip(cases, results):
        lines = result.stderr.splitlines()
        assert (result.returncode, len(lines)) == (status, 1), (args, result.returncode, result.stderr)
        assert word in lines[0] and "Traceback" not in result.stderr and not result.stdout, (args, result.stderr)
    assert await stack.log_size() == before  # nothing was published by any of them


def _with_database(dsn: str, name: str) -> str:
    """``dsn`` naming another database (the path of the URL)."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(dsn)._replace(path="/" + name))


@pytest.mark.parametrize("service", ["api", "stream", "projector"])
async def test_a_service_refused_for_good_exits_with_one_error_record(stack, service):
    """A database that refuses for good (unknown database): the service exits 1 with one ERROR
    record saying why, no traceback, so its supervisor restarts it with backoff; a URL no
    connection could use: the settings' one line and status 2. Before: a traceback, or retries
    forever."""
    ok = stack.env()
    no_db = {
        **ok,
        "TICKERWIRE_DATABASE_URL": _with_database(ok["TICKERWIRE_DATABASE_URL"], "nosuchdb"),
        "TICKERWIRE_API_ADMIN_PORT": "0",
        "TICKERWIRE_STREAM_ADMIN_PORT": "0",
        "TICKERWIRE_PROJECTOR_ADMIN_PORT": "0",
        "TICKERWIRE_API_PORT": "0",
        "TICKERWIRE_STREAM_PORT": "0",
    }
    result = await asyncio.to_thread(run_cli, no_db, service)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = orjson.loads(result.stderr.splitlines()[-1])
    assert last["level"] == "error" and '"nosuchdb" does not exist' in last["msg"], last
    bad_url = {**no_db, "TICKERWIRE_DATABASE_URL": ok["TICKERWIRE_DATABASE_URL"] + "?sslmode=bogus"}
    result = await asyncio.to_thread(run_cli, bad_url, service)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("tickerwire: ") and "sslmode" in line], (
        result.stderr
    )


def test_version():
    result = subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", "--version"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0 and result.stdout.startswith("tickerwire ")
