"""`up`'s own Apache Kafka and its state directory: what a start keeps, what it refuses, and
what `--fresh` removes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickerwire.services.cli.up.broker import (
    DEMO_KEY_ID,
    LAYOUT,
    DemoState,
    OwnBroker,
    check_state,
    choose_broker,
    demo_key_id,
    start_over,
)


def kafka(state_dir: Path, found_log: bool, nodes: int = 1) -> OwnBroker:
    return OwnBroker(state_dir, found_log=found_log, nodes=nodes)


def a_database(state_dir: Path) -> None:
    (state_dir / "pgdata").mkdir(exist_ok=True)
    (state_dir / "pgdata" / "PG_VERSION").write_text("16\n")


def test_the_database_is_kept_beside_the_kept_log_it_was_projected_from(tmp_path):
    assert not check_state(tmp_path, kafka(tmp_path, found_log=False))  # a first start: nothing to keep
    a_database(tmp_path)
    assert check_state(tmp_path, kafka(tmp_path, found_log=True))
    assert check_state(tmp_path, kafka(tmp_path, found_log=True))
    assert (tmp_path / "layout").read_text().split()[-1] == str(LAYOUT)


def test_a_database_whose_log_is_gone_is_refused_not_wiped(tmp_path):
    check_state(tmp_path, kafka(tmp_path, found_log=False))
    a_database(tmp_path)
    with pytest.raises(ValueError, match=r"follows the Kafka log in .*kafka, which is gone: pass --fresh"):
        check_state(tmp_path, kafka(tmp_path, found_log=False))
    assert (tmp_path / "pgdata" / "PG_VERSION").exists()


def test_a_state_directory_of_the_memory_only_broker_is_refused_in_one_line(tmp_path):
    a_database(tmp_path)  # an earlier version's: a database, no marker, no Kafka log
    with pytest.raises(ValueError) as refused:
        check_state(tmp_path, kafka(tmp_path, found_log=False))
    said = str(refused.value)
    assert "\n" not in said and "was projected from a log that is gone" in said and "--fresh" in said
    assert (tmp_path / "pgdata" / "PG_VERSION").exists()


def test_a_state_directory_of_a_newer_layout_is_refused(tmp_path):
    (tmp_path / "layout").write_text(f"tickerwire up state, layout {LAYOUT + 1}\n")
    with pytest.raises(ValueError, match=f"written by a newer tickerwire \\(layout {LAYOUT + 1}"):
        check_state(tmp_path, kafka(tmp_path, found_log=False))


def test_changing_the_number_of_nodes_is_refused_while_the_database_follows_the_other_log(tmp_path):
    check_state(tmp_path, kafka(tmp_path, found_log=False))
    a_database(tmp_path)
    with pytest.raises(
        ValueError, match=r"follows the log of one node \(kafka/\), and this start asks for --brokers 3"
    ):
        check_state(tmp_path, kafka(tmp_path, found_log=True, nodes=3))
    assert check_state(tmp_path, kafka(tmp_path, found_log=True))


def test_a_marker_written_before_it_named_its_log_follows_the_one_node_log(tmp_path):
    (tmp_path / "pgdata.follows-kafka").touch()
    a_database(tmp_path)
    assert check_state(tmp_path, kafka(tmp_path, found_log=True))


def test_a_configured_broker_keeps_no_database_and_drops_the_marker(tmp_path):
    check_state(tmp_path, kafka(tmp_path, found_log=False))
    a_database(tmp_path)
    assert not check_state(tmp_path, None)
    assert not (tmp_path / "pgdata.follows-kafka").exists()


def test_fresh_removes_the_data_of_earlier_starts_and_keeps_their_logs(tmp_path):
    check_state(tmp_path, kafka(tmp_path, found_log=False))
    a_database(tmp_path)
    for name in ("kafka/log", "kafka3/node1", "pgreplica1"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "webhooks-signing-key").write_text("k\n")
    (tmp_path / "projector.log").write_text("kept\n")
    removed = start_over(tmp_path)
    assert set(removed) == {
        "pgdata",
        "kafka",
        "kafka3",
        "pgreplica1",
        "pgdata.follows-kafka",
        "webhooks-signing-key",
        "layout",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["projector.log"]
    assert start_over(tmp_path) == []


def test_the_demo_key_is_kept_beside_a_kept_log_only(tmp_path):
    (tmp_path / "kafka").mkdir()
    first = kafka(tmp_path, found_log=False)
    assert first.saved_demo() is None
    first.save_demo(DemoState("tw_live_x", DEMO_KEY_ID, dataset=True))
    assert (tmp_path / "kafka" / "demo.json").stat().st_mode & 0o777 == 0o600
    assert kafka(tmp_path, found_log=True).saved_demo() == DemoState("tw_live_x", DEMO_KEY_ID, dataset=True)


def test_a_new_demo_key_gets_a_fresh_id_where_the_log_may_hold_key_demo(tmp_path):
    assert demo_key_id(kafka(tmp_path, found_log=False)) == DEMO_KEY_ID
    kept, configured = demo_key_id(kafka(tmp_path, found_log=True)), demo_key_id(None)
    assert kept.startswith(DEMO_KEY_ID + "_") and configured.startswith(DEMO_KEY_ID + "_") and kept != configured


def test_three_nodes_need_a_kafka_of_ups_own_and_keep_a_log_of_their_own(tmp_path):
    assert choose_broker("127.0.0.1:9092", tmp_path) is None
    with pytest.raises(ValueError, match="--brokers 3 starts a cluster .* needs no configured broker"):
        choose_broker("127.0.0.1:9092", tmp_path, nodes=3)
    assert choose_broker(None, tmp_path) == kafka(tmp_path, found_log=False)
    one, three = kafka(tmp_path, found_log=True), kafka(tmp_path, found_log=True, nodes=3)
    assert (one.data_dir.name, three.data_dir.name) == ("kafka", "kafka3")
    assert three.label == "Apache Kafka (3 nodes)" and one.label == "Apache Kafka" and one.kind == "apache"
