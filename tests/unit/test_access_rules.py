"""The one access rule (api and stream alike) and how a settled admission batch is handed out."""

from __future__ import annotations

from tickerwire.services.api.admission import hand_out
from tickerwire.services.readmodel.access import Principal, gate


def principal(revoked=False, status="active", badge="ok") -> Principal:
    return Principal("h", "ws", revoked, status, badge, None, None, None)


def test_gates_in_order_unknown_revoked_suspended_then_badge():
    assert gate(None).code == "NOT_AUTHENTICATED"  # unknown key
    assert gate(principal(revoked=True, status="suspended")).code == "NOT_AUTHENTICATED"
    assert gate(principal(status="suspended", badge="missing")).code == "WORKSPACE_SUSPENDED"
    assert gate(principal(badge="missing")).code == "BADGE_MISSING"
    assert gate(principal(badge="unknown")).code == "BADGE_MISSING"
    assert gate(principal(badge="warning")) is None  # grace period
    assert gate(principal()) is None


class _P:
    def __init__(self, rate, quota):
        self.rate, self.quota = rate, quota


def settled(granted, minute_before, day_before):
    return {
        "granted": granted,
        "minute_before": minute_before,
        "day_before": day_before,
        "minute_reset": 120,
        "day_reset": 86400,
        "db_now": 61.0,
    }


def test_grants_go_to_the_first_arrivals_each_with_its_own_count():
    usages = hand_out(settled(2, 3, 10), [_P(5, 100)] * 4)
    assert [u.outcome for u in usages] == ["OK", "OK", "RATE_LIMITED", "RATE_LIMITED"]
    assert [u.minute_used for u in usages] == [4, 5, 5, 5]
    assert [u.day_used for u in usages] == [11, 12, 12, 12]


def test_a_full_day_refuses_with_the_quota_and_leaves_the_minute_as_it_was():
    usages = hand_out(settled(1, 0, 99), [_P(60, 100)] * 3)
    assert [u.outcome for u in usages] == ["OK", "QUOTA_EXHAUSTED", "QUOTA_EXHAUSTED"]
    assert [(u.minute_used, u.day_used) for u in usages] == [(1, 100), (1, 100), (1, 100)]
    assert usages[1].headers(refused="QUOTA_EXHAUSTED")["X-RateLimit-Remaining"] == "59"


def test_a_zero_rate_limit_refuses_everything_as_rate_limited():
    assert [u.outcome for u in hand_out(settled(0, 0, 0), [_P(0, 100)] * 2)] == ["RATE_LIMITED"] * 2
