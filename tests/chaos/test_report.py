"""The report's account of a projector SIGKILL on made-up histories (a post held back by
another fault in the kill's window counts in the wide figure, not in the SIGKILL's own; a post
the SIGKILL alone held back counts in both), its count of ERROR lines, and its lines on the
lost, doubled and refused counts and the failovers, and each webhook endpoint's line."""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import datetime, timezone

from tests.chaos.history import Delivery, Failover, Fault, History
from tests.chaos.report import after_kills, kill_costs, markdown, summary
from tests.chaos.run import error_kinds, error_lines, unexplained_errors
from tests.support.receivers import Request


def history(faults: list[Fault], posts: dict[int, tuple[float, float]]) -> History:
    h = History(seed=5)
    h.faults = faults
    h.restarts = [("projector", 10.3)]
    for post_id, (published, delivered) in posts.items():
        h.published[(post_id, "en-US")] = published
        h.deliveries["f"].append(Delivery((post_id, "en-US"), 0, post_id, delivered))
    return h


KILL = Fault("kill projector", 10.0, 11.5)


def test_a_post_a_projector_sigstop_held_back_is_not_put_down_to_the_sigkill_before_it():
    paused = Fault("pause projector", 18.0, 23.0)
    h = history([KILL, paused], {1: (10.2, 11.9), 2: (18.5, 23.4)})
    assert [round(d, 6) for d in sorted(after_kills(h)["any"])] == [1.7, 4.9]
    assert [round(d, 6) for d in after_kills(h)["alone"]] == [1.7]


def test_a_slow_hand_over_stays_the_sigkills_and_an_api_fault_changes_nothing():
    h = history([KILL, Fault("kill api", 12.0, 13.0)], {1: (10.2, 17.2)})
    assert [round(d, 6) for d in after_kills(h)["alone"]] == [7.0]
    (cost,) = kill_costs(h)
    assert cost == {
        "at": 10.0,
        "restarted_after_s": 0.3,
        "ready_after_s": 1.5,
        "delivering_after_s": 7.2,
        "slowest_in_window_s": 7.0,
        "other_faults_in_window": ["kill api"],
    }


def test_error_lines_are_counted_from_the_services_json_logs(tmp_path):
    # Until this test the run looked for " ERROR " in lines that are JSON, and counted 0 always.
    line = '{"ts":"2026-11-27T09:00:00.000+00:00","level":"%s","service":"s","logger":"%s","msg":"%s"}\n'
    (tmp_path / "projector-4001.log").write_text(
        line % ("info", "x", "fine")
        + line % ("error", "aiokafka", "Unable connect to node with id 1")
        + "a line a library printed: ERROR somewhere\n"
        + line % ("error", "aiokafka", "Unable connect to node with id 1")
    )
    (tmp_path / "api-4002.log").write_text(line % ("critical", "tickerwire.api", "down for 12 s"))
    assert error_lines(tmp_path) == {"api": 1, "projector": 2}
    assert error_kinds(tmp_path) == {
        "projector aiokafka: Unable connect to node with id N": 2,
        "api tickerwire.api: down for N s": 1,
    }


def test_an_error_line_no_injected_fault_explains_is_a_violation(tmp_path):
    history = History(7)
    history.wall_t0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc).timestamp()
    history.faults.append(Fault("kill projector", 10.0, 11.0))
    line = '{"ts":"2026-11-27T09:00:%06.3f+00:00","level":"error","service":"s","logger":"x","msg":"%s"}\n'
    (tmp_path / "projector-4001.log").write_text(
        line % (9.5, "a second before the kill: explained")
        + line % (25.0, "fourteen seconds after the restart: explained")
        + line % (40.0, "long after any fault: a violation")
        + line % (59.0, "after the checks ended: the stop's business")
    )
    assert unexplained_errors(tmp_path, history, until=50.0) == [
        "40.0s: projector logged an ERROR no injected fault explains: x: long after any fault: a violation"
    ]


def test_the_lost_doubled_and_refused_counts_and_the_failovers_are_in_the_markdown():
    h = history([KILL], {1: (10.2, 11.9)})
    h.failovers.append(
        Failover(killed=20.0, promoted=20.4, api=21.5, ready=23.0, rebuilt=22.0, pushed=40, unreadable=3)
    )
    extra = {"tally": {"lost": 3, "doubled": 1, "refused": 4}, "failovers": [asdict(f) for f in h.failovers]}
    text = markdown(summary(h, [], extra), "timeline.png")
    assert (
        "- Lost (post, locale) pairs (acknowledged, not served or never delivered): 3; pushed or walked more than "
        "once: 1; cursors the service issued, then refused: 4"
    ) in text
    assert "- Failovers: 1; from the SIGKILL of the primary: standby promoted p50 0.40 s" in text
    assert "API answering p50 1.50 s" in text and "every process ready p50 3.00 s" in text
    assert "pairs pushed in the 15 s before it that GET did not serve once the API answered: 3 of 40" in text


def test_each_webhook_endpoint_has_a_line_with_its_answers_counts_and_latency():
    h = history([], {1: (10.0, 10.5)})
    h.endpoints["whe_a"] = None
    body = b'{"log_position":"0:1","data":{"id":1,"lang":"en-US"}}'
    h.hook("whe_a", Request("msg_1", 1, body, "500"))
    h.hook("whe_a", Request("msg_1", 1, body, "ok"))
    h.hooked["whe_a"] = [replace(x, at=11.0) for x in h.hooked["whe_a"]]
    counts = {"requests": 2, "acknowledged": 1, "lost": 0, "out of order": 0, "doubled": 0, "changed": 0}
    text = markdown(summary(h, [], {"webhooks": {"whe_a": counts}}), "timeline.png")
    assert (
        "- Webhook endpoint whe_a: 2 requests (500 1, ok 1), 1 announcements acknowledged; lost: 0; out of order: 0; "
        "doubled: 0; changed: 0; publish-to-receipt p50 1.00 s, p99 1.00 s, max 1.00 s (n=1)"
    ) in text
