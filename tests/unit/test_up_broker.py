"""The choice of `up`'s own broker: when the embedded database and the demo key are kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickerwire.services.cli.up.broker import (
    APACHE,
    DEMO_KEY_ID,
    EMBEDDED,
    DemoState,
    OwnBroker,
    choose_broker,
    database_kept,
    demo_key_id,
)


def apache(state_dir: Path, found_log: bool) -> OwnBroker:
    return OwnBroker(APACHE, state_dir, keeps_log=True, found_log=found_log)


def test_the_database_is_kept_only_beside_the_kept_log_it_was_last_projected_from(tmp_path):
    embedded = OwnBroker(EMBEDDED, tmp_path, keeps_log=False, found_log=False)
    assert not database_kept(apache(tmp_path, found_log=False), tmp_path)  # a new log: a new database
    assert database_kept(apache(tmp_path, found_log=True), tmp_path)
    assert database_kept(apache(tmp_path, found_log=True), tmp_path)
    # The embedded broker's start re-creates the database for its own log ...
    assert not database_kept(embedded, tmp_path)
    # ... so the next start on the kept Apache log does not keep it (the projector replays the log).
    assert not database_kept(apache(tmp_path, found_log=True), tmp_path)
    assert database_kept(apache(tmp_path, found_log=True), tmp_path)
    assert not database_kept(None, tmp_path)  # a configured broker: not known to be in step
    assert not database_kept(apache(tmp_path, found_log=True), tmp_path)


def test_the_demo_key_is_kept_beside_a_kept_log_only(tmp_path):
    (tmp_path / "kafka").mkdir()
    first = apache(tmp_path, found_log=False)
    assert first.saved_demo() is None
    first.save_demo(DemoState("tw_live_x", DEMO_KEY_ID, dataset=True))
    assert (tmp_path / "kafka" / "demo.json").stat().st_mode & 0o777 == 0o600
    assert apache(tmp_path, found_log=True).saved_demo() == DemoState("tw_live_x", DEMO_KEY_ID, dataset=True)
    assert OwnBroker(EMBEDDED, tmp_path, keeps_log=False, found_log=False).saved_demo() is None


def test_a_new_demo_key_gets_a_fresh_id_where_the_log_may_hold_key_demo(tmp_path):
    assert demo_key_id(apache(tmp_path, found_log=False)) == DEMO_KEY_ID
    assert demo_key_id(OwnBroker(EMBEDDED, tmp_path, keeps_log=False, found_log=False)) == DEMO_KEY_ID
    kept, configured = demo_key_id(apache(tmp_path, found_log=True)), demo_key_id(None)
    assert kept.startswith(DEMO_KEY_ID + "_") and configured.startswith(DEMO_KEY_ID + "_") and kept != configured


def test_broker_with_a_configured_kafka_is_refused_and_without_one_means_the_configured_one(tmp_path):
    with pytest.raises(ValueError, match="--broker apache starts a broker of up's own"):
        choose_broker(APACHE, "127.0.0.1:9092", tmp_path)
    assert choose_broker(None, "127.0.0.1:9092", tmp_path) is None
    assert choose_broker(None, None, tmp_path) == OwnBroker(EMBEDDED, tmp_path, keeps_log=False, found_log=False)


def test_three_nodes_need_apache_kafka_of_ups_own_and_keep_a_log_of_their_own(tmp_path):
    with pytest.raises(ValueError, match="--brokers 3 .* needs --broker apache"):
        choose_broker(None, None, tmp_path, nodes=3)
    with pytest.raises(ValueError, match="no configured broker"):
        choose_broker(APACHE, "127.0.0.1:9092", tmp_path, nodes=3)
    one, three = apache(tmp_path, found_log=True), OwnBroker(APACHE, tmp_path, True, True, nodes=3)
    assert (one.data_dir.name, three.data_dir.name) == ("kafka", "kafka3")
    assert three.label == "Apache Kafka (3 nodes)" and one.label == "Apache Kafka"
    # The database follows one log: after a start on the other, it is re-created.
    assert not database_kept(one, tmp_path) and database_kept(one, tmp_path)
    assert not database_kept(three, tmp_path) and database_kept(three, tmp_path)
    assert not database_kept(one, tmp_path)


def test_a_marker_written_before_it_named_its_log_follows_the_one_node_log(tmp_path):
    (tmp_path / "pgdata.follows-kafka").touch()
    assert database_kept(apache(tmp_path, found_log=True), tmp_path)
