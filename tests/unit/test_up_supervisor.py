"""`up`'s supervisor: one part type, four explicit states, one restart path (pure logic: the parts
here are stand-ins whose life the test scripts; tests/e2e/test_up.py kills real ones)."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import orjson

from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.postgres import EmbeddedPostgres, EmbeddedReplica
from tickerwire.services.cli.up import supervisor as sup
from tickerwire.services.cli.up.children import Child, Stack
from tickerwire.services.cli.up.embedded import Embedded
from tickerwire.services.cli.up.supervisor import MAX_FAILED_STARTS, Part, StackSupervisor, State, stack_parts
from tickerwire.services.common.runtime.retry import backoff_delays


class Scripted:
    """A part's life as the test says: alive or not, and whether its next start fails."""

    def __init__(self, fail_starts: int = 0) -> None:
        self.up = True
        self.pid = 100
        self.fail_starts = fail_starts
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        if self.fail_starts:
            self.fail_starts -= 1
            raise OSError("port 5433 already in use\nsecond line")
        self.pid += 1
        self.up = True

    def part(self, name: str = "api", came_back: str = "") -> Part:
        return Part(
            name,
            name,
            lambda: self.up,
            self.start,
            lambda: self.pid,
            lambda: "status -9",
            lambda: Path(f"/state/{name}.log"),
            came_back,
        )


def supervisor(tmp_path: Path, *parts: Part) -> StackSupervisor:
    return StackSupervisor(list(parts), tmp_path / "up.json", {}, Stack(tmp_path))


async def settle(s: StackSupervisor, now: float) -> None:
    """Ticks at ``now`` until nothing changes (a start task runs in between)."""
    for _ in range(10):
        await asyncio.sleep(0)
        if not s.tick(now):
            await asyncio.sleep(0)
            if not s.tick(now):
                return


async def test_a_dead_part_goes_running_backoff_starting_running_and_each_step_is_said(tmp_path, capsys):
    life = Scripted()
    part = life.part(came_back="api came back")
    s = supervisor(tmp_path, part)
    assert not s.tick(0.0) and part.state is State.RUNNING
    life.up = False
    assert s.tick(1.0) and part.state is State.BACKOFF
    assert part.next_start_at is not None and 1.0 <= part.next_start_at <= 1.5  # the first pause: 0 to 0.5 s
    assert s.states()["api"] == {
        "state": "backoff",
        "pid": None,
        "restarts": 0,
        "reason": "status -9",
        "log": "/state/api.log",
    }
    assert not s.tick(part.next_start_at - 0.001)  # not before it is due
    await settle(s, part.next_start_at)
    assert part.state is State.RUNNING and part.restarts == 1 and life.starts == 1
    assert s.states()["api"]["pid"] == 101
    said = [line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert said[0].startswith("api exited (status -9): running → backoff; next start in ")
    assert said[0].endswith("s (log: /state/api.log)")
    assert said[1:] == [
        "api starting: backoff → starting",
        "api restarted (pid 101, restart 1): starting → running",
        "api came back",
    ]


async def test_starts_that_keep_failing_end_fatal_with_the_reason_and_no_more_tries(tmp_path, caplog, capsys):
    life = Scripted(fail_starts=1000)
    part = life.part("postgres")
    s = supervisor(tmp_path, part)
    life.up = False
    now = 0.0
    for _ in range(MAX_FAILED_STARTS * 4):
        now += sup.RESTART_CAP_S + 1
        await settle(s, now)
        if part.state is State.FATAL:
            break
    assert part.state is State.FATAL and life.starts == MAX_FAILED_STARTS
    assert part.reason == f"{MAX_FAILED_STARTS} starts failed in a row, the last: port 5433 already in use"
    with caplog.at_level(logging.ERROR, logger="tickerwire.up"):
        for _ in range(5):
            now += 100
            await settle(s, now)
    assert life.starts == MAX_FAILED_STARTS  # fatal: no more starts
    lines = capsys.readouterr().out.splitlines()
    assert any(
        "postgres did not start (port 5433 already in use): starting → backoff; next start in" in x for x in lines
    )
    assert any(x.endswith("postgres did not start (port 5433 already in use): starting → fatal") for x in lines)
    assert s.states()["postgres"]["state"] == "fatal"


async def test_a_start_that_fails_once_is_tried_again_and_resets_the_count(tmp_path):
    life = Scripted(fail_starts=2)
    part = life.part()
    s = supervisor(tmp_path, part)
    life.up = False
    now = 0.0
    while part.state is not State.RUNNING or life.starts < 3:
        now += sup.RESTART_CAP_S + 1
        await settle(s, now)
        assert now < 1000
    assert (part.restarts, part.failed_starts, life.starts) == (1, 0, 3)


class Ceiling(random.Random):
    """Draws every pause at its ceiling, so the test sees the ceilings themselves."""

    def uniform(self, a: float, b: float) -> float:
        return b


async def test_the_backoff_grows_while_a_part_keeps_dying_and_starts_over_once_it_ran_a_minute(tmp_path, monkeypatch):
    monkeypatch.setattr(sup, "restart_delays", lambda: backoff_delays(sup.RESTART_BASE_S, sup.RESTART_CAP_S, Ceiling()))
    life = Scripted()
    part = life.part()
    part.delays = sup.restart_delays()
    s = supervisor(tmp_path, part)
    pauses, now = [], 0.0

    async def dies_after(ran: float) -> None:
        nonlocal now
        now += ran
        life.up = False
        s.tick(now)
        assert part.next_start_at is not None
        pauses.append(round(part.next_start_at - now, 3))
        now = part.next_start_at
        await settle(s, now)
        assert part.state is State.RUNNING

    for _ in range(7):  # dies right after every start: the ceiling doubles up to 10 s
        await dies_after(1.0)
    await dies_after(sup.HEALTHY_AFTER_S + 1)  # ran a minute: healthy again, the ceiling starts over
    await dies_after(1.0)
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 0.5, 1.0]


async def test_every_change_is_written_to_up_json(tmp_path):
    life = Scripted()
    s = supervisor(tmp_path, life.part("projector"), Scripted().part("api"))
    s.write()
    written = orjson.loads((tmp_path / "up.json").read_bytes())
    assert {name: p["state"] for name, p in written["parts"].items()} == {"projector": "running", "api": "running"}
    life.up = False
    assert s.tick(1.0)
    s.write()
    assert orjson.loads((tmp_path / "up.json").read_bytes())["parts"]["projector"]["state"] == "backoff"


def test_the_parts_of_a_stack_are_its_children_then_each_server_by_its_role(tmp_path):
    stack = Stack(tmp_path)
    stack.children += [Child(name, {}, tmp_path / f"{name}.log") for name in ("projector", "api", "stream")]
    pg = EmbeddedPostgres(tmp_path / "pg", port=5433)
    replica = EmbeddedReplica("postgresql://x@127.0.0.1:5433/db", tmp_path / "r1", port=5434)
    three = Embedded(postgres=pg, replicas=[replica], broker=ApacheKafkaCluster(tmp_path / "k3"))
    names = [(p.name, p.label) for p in stack_parts(stack, three)]
    assert names == [
        ("projector", "projector"),
        ("api", "api"),
        ("stream", "stream"),
        ("postgres", "embedded PostgreSQL"),
        ("postgres-replica-1", "embedded PostgreSQL replica 1"),
        ("kafka-node-1", "embedded Apache Kafka node 1"),
        ("kafka-node-2", "embedded Apache Kafka node 2"),
        ("kafka-node-3", "embedded Apache Kafka node 3"),
    ]
    one = Embedded(broker=ApacheKafka(tmp_path / "k1", port=9092))
    [kafka] = stack_parts(Stack(tmp_path), one)
    assert (kafka.name, kafka.label) == ("kafka", "embedded Apache Kafka")
    assert kafka.came_back.startswith(f"Apache Kafka came back with its log ({tmp_path / 'k1'})")
    # A failover gives the roles to other servers: a part follows its role, not a server.
    parts = stack_parts(Stack(tmp_path), three)
    other = EmbeddedPostgres(tmp_path / "other", port=5999)
    other.running = lambda: True  # type: ignore[method-assign]
    assert not parts[0].alive()
    assert parts[0].log_path == pg.log_path
    three.postgres = other
    assert parts[0].alive() and parts[0].log_path == other.log_path != pg.log_path  # its log, the new server's
    assert [p.name for p in stack_parts(Stack(tmp_path), Embedded())] == []
