"""Webhook endpoints without I/O: the operator's filter options (the stream's grammar, the event
contract's values), and when the dispatcher's disabling of an endpoint still holds, as the
partner JSON (services/api/partner.py) and `tickerwire webhooks list` both show it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tickerwire.services.api import partner
from tickerwire.services.cli.admin import BadArgument
from tickerwire.services.cli.webhooks import delivery_state, endpoint_filter

AT = datetime(2026, 1, 5, 14, 31, 2, 118000, tzinfo=timezone.utc)


def test_filters_take_the_streams_grammar_in_canonical_case():
    assert endpoint_filter("en-us,,de-DE,EN-US", "locales") == ["en-US", "de-DE"]
    assert endpoint_filter("btc,ETH,btc", "tickers") == ["BTC", "ETH"]
    assert endpoint_filter("bitcoin-etfs", "categories") == ["bitcoin-etfs"]
    assert endpoint_filter(None, "locales") is None and endpoint_filter(",,", "tickers") is None


@pytest.mark.parametrize(
    ("raw", "name", "word"),
    [
        ("en_US", "locales", "not a locale code"),
        ("Bitcoin ETFs", "categories", "not a category slug"),
        ("BTC$", "tickers", "not a ticker symbol"),
        (",".join(f"T{i}" for i in range(21)), "tickers", "at most 20"),
    ],
)
def test_a_value_the_contract_refuses_names_the_option(raw, name, word):
    with pytest.raises(BadArgument) as refused:
        endpoint_filter(raw, name)
    assert str(refused.value).startswith(f"--{name}: ") and word in str(refused.value)


def row(**delivery) -> dict:
    base = {
        "id": "whe_abcd1234",
        "version": 5,
        "url": "https://hooks.example/x",
        "description": "",
        "locales": None,
        "tickers": ["BTC"],
        "categories": None,
        "status": "active",
        "secret_generation": 2,
        "created_at": AT,
        "state": None,
        "disabled_version": None,
        "disabled_reason": None,
        "disabled_at": None,
        "failing_since": None,
        "next_attempt_at": None,
        "attempt": None,
        "delivered": None,
        "last_delivered_at": None,
        "cursor": None,
    }
    return {**base, **delivery}


def test_a_disabling_holds_until_a_later_version_of_the_endpoint():
    gone = {"state": "disabled", "disabled_reason": "410 Gone", "disabled_at": AT, "failing_since": AT}
    held = partner.webhook_endpoint_item(row(**gone, disabled_version=5))
    assert (held["status"], held["disabled_reason"], held["disabled_at"]) == (
        "disabled",
        "410 Gone",
        "2026-01-05T14:31:02.118Z",
    )
    assert held["failing_since"] is None and held["next_attempt_at"] is None
    assert delivery_state(row(**gone, disabled_version=5)) == "disabled (410 Gone)"
    resumed = partner.webhook_endpoint_item(row(**gone, disabled_version=4))  # resumed at version 5
    assert (resumed["status"], resumed["disabled_reason"], resumed["disabled_at"]) == ("active", None, None)
    assert delivery_state(row(**gone, disabled_version=4)).startswith("failing since 2026-01-05T14:31:02")


def test_an_endpoint_before_the_dispatcher_took_it_up():
    item = partner.webhook_endpoint_item(row())
    assert item["filters"] == {"locales": None, "tickers": ["BTC"], "categories": None}
    assert (item["status"], item["attempt"], item["delivered"], item["cursor"]) == ("active", 0, 0, None)
    assert item["created_at"] == "2026-01-05T14:31:02.118Z" and "secret" not in "".join(
        set(item) - {"secret_generation"}
    )
    assert delivery_state(row()) == "-"
    paused = partner.webhook_endpoint_item(row(status="paused", state="active", next_attempt_at=AT, failing_since=AT))
    assert (paused["status"], paused["next_attempt_at"], paused["failing_since"]) == ("paused", None, None)
