"""The pure rules of reading from replicas: consistency marks, lag and the rotation's bounds."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry

from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.db.replicas import Replicas, replica_name
from tickerwire.services.common.runtime.config import ConfigError
from tickerwire.services.readmodel import positions
from tickerwire.services.readmodel.logposition import LogPosition, covers, record_text

REQUIRED = {"TICKERWIRE_DATABASE_URL": "postgresql://x/y", "TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS": "k:9092"}


def test_a_mark_parses_as_the_x_log_position_header_writes_it():
    assert LogPosition.parse("0:12,1:40").marks() == {0: 12, 1: 40}
    assert LogPosition.parse(" 3:7 , 0:1").text() == "0:1,3:7"
    assert LogPosition.parse("0:4,0:9").marks() == {0: 9}  # named twice: the furthest
    assert LogPosition.parse("") == LogPosition() and LogPosition().text() == ""
    assert LogPosition.stored("[[1, 40], [0, 12]]").text() == "1:40,0:12"  # as the database ordered them
    assert LogPosition.stored("[]") == LogPosition.stored(None) == LogPosition()


def test_a_pushed_record_is_reflected_by_a_position_past_its_offset():
    assert record_text(2, 1611) == "2:1611"
    reflecting = LogPosition.reflecting(2, 1611)
    assert reflecting.text() == "2:1612"
    assert LogPosition.parse("0:5,2:1612").covers(reflecting)
    assert not LogPosition.parse("2:1611").covers(reflecting)  # the record's own offset: not yet applied


@pytest.mark.parametrize("bad", ["0", "0:", ":5", "a:1", "0:-1", "0:1;1:2", "0:1,", "1" * 12 + ":1", "0:" + "9" * 19])
def test_anything_else_is_refused(bad):
    with pytest.raises(ValueError):
        LogPosition.parse(bad)


def test_data_is_at_least_a_mark_only_when_every_partition_is_at_or_past_it():
    assert covers({0: 5, 1: 9}, {0: 5, 1: 9})
    assert covers({0: 6, 1: 9, 2: 1}, {0: 5})
    assert not covers({0: 5, 1: 8}, {0: 5, 1: 9})
    assert not covers({0: 5}, {1: 1})  # a partition it has not seen is at 0
    assert covers({}, {})
    assert LogPosition.of({0: 6, 1: 9}).covers(LogPosition.of({0: 5}))


def test_a_replica_is_named_by_host_and_port_never_by_its_password():
    assert replica_name("postgresql://tw:s3cret@db-replica-1:5432/tw") == "db-replica-1:5432"


def test_read_urls_are_listed_checked_and_kept_out_of_the_repr():
    config = FullConfig.from_env(
        {**REQUIRED, "TICKERWIRE_DATABASE_READ_URLS": "postgresql://a:pw@r1:5432/tw, postgresql://r2/tw"}
    )
    assert config.read_urls == ["postgresql://a:pw@r1:5432/tw", "postgresql://r2/tw"]
    assert "pw" not in repr(config)
    assert FullConfig.from_env(REQUIRED).read_urls == []
    with pytest.raises(ConfigError, match="TICKERWIRE_DATABASE_READ_URLS must be a postgresql:// URL"):
        FullConfig.from_env({**REQUIRED, "TICKERWIRE_DATABASE_READ_URLS": "mysql://r1/tw"})
    with pytest.raises(ConfigError, match="TICKERWIRE_DATABASE_READ_URLS has an invalid port"):
        FullConfig.from_env({**REQUIRED, "TICKERWIRE_DATABASE_READ_URLS": "postgresql://r1:99999/tw"})


def replicas(*urls: str, registry: CollectorRegistry | None = None) -> Replicas:
    config = FullConfig.from_env({**REQUIRED, "TICKERWIRE_DATABASE_READ_URLS": ",".join(urls)})
    return Replicas(
        config,
        "tw.posts.v1",
        positions_sql=positions.marks_array_sql("$1"),
        covers=covers,
        leave_after_s=2.0,
        rejoin_below_s=0.5,
        registry=registry or CollectorRegistry(),
    )


def test_without_read_urls_there_is_nothing_to_read_from():
    assert not replicas()
    assert replicas().pick() is None


def test_lag_is_the_age_of_the_oldest_flushed_wal_not_replayed():
    rs = replicas("postgresql://r1/tw")
    for at, flushed in ((10.0, 100), (11.0, 200), (12.0, 300)):
        rs.sample(at, flushed)
    assert rs.lag_of(300, 13.0) == 0.0  # replayed all the primary had: no lag, however idle
    assert rs.lag_of(250, 13.0) == pytest.approx(1.0)  # 300 flushed at 12.0, not replayed
    assert rs.lag_of(100, 13.0) == pytest.approx(2.0)
    assert rs.lag_of(0, 13.0) == pytest.approx(3.0)


def test_a_replica_leaves_past_the_bound_and_rejoins_only_well_within_it():
    registry = CollectorRegistry()
    rs = replicas("postgresql://r1:5432/tw", registry=registry)
    (r,) = rs.replicas
    assert registry.get_sample_value("tickerwire_replica_in_rotation", {"replica": "r1:5432"}) == 0
    rs.judge(r, 0.1)
    assert registry.get_sample_value("tickerwire_replica_in_rotation", {"replica": "r1:5432"}) == 1
    assert r.in_rotation
    rs.judge(r, 1.9)
    assert r.in_rotation  # within the bound
    rs.judge(r, 2.1)
    assert not r.in_rotation and "over the bound of 2 s" in r.reason
    rs.judge(r, 1.0)
    assert not r.in_rotation  # caught up some, not enough
    rs.judge(r, 0.4)
    assert r.in_rotation and r.reason == ""
    rs.failed(r, ConnectionRefusedError("refused"))
    assert not r.in_rotation and r.left.is_set() and "refused" in r.reason
    assert registry.get_sample_value("tickerwire_replica_in_rotation", {"replica": "r1:5432"}) == 0
    rs.judge(r, math.inf)
    assert not r.in_rotation
