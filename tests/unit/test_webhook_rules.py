"""The webhook rules that need no I/O (docs/webhooks.md): the retry schedule and what an answer
means, the addresses a webhook may reach, the secrets that sign during a rotation, and when a
dispatcher counts as stalled."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from tickerwire.services.common.http.signing import derive_secret, headers, secret_text, signature
from tickerwire.services.common.http.targets import (
    OpenTargets,
    TargetRefused,
    address_refusal,
    check_literal,
    check_url,
    host_and_port,
)
from tickerwire.services.readmodel.filters import EVERYTHING
from tickerwire.services.webhooks.endpoint_record import Endpoint
from tickerwire.services.webhooks.schedule import (
    RETRY_DELAYS_S,
    due_to_disable,
    next_delay,
    outcome_of,
    parse_retry_after,
)

KEY = bytes(range(32))
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, "delivered"),
        (204, "delivered"),
        (299, "delivered"),
        (301, "failed"),
        (302, "failed"),
        (400, "failed"),
        (404, "failed"),
        (410, "gone"),
        (429, "failed"),
        (500, "failed"),
        (503, "failed"),
    ],
)
def test_what_an_answer_means(status, outcome):
    assert outcome_of(status) == outcome


def test_the_schedule_scaled_and_its_last_delay_repeating():
    assert [next_delay(n, 1.0) for n in range(1, 10)] == [5, 300, 1800, 7200, 18000, 36000, 36000, 36000, 36000]
    assert next_delay(1, 0.002) == pytest.approx(0.01)
    assert RETRY_DELAYS_S[0] == 5.0


def test_retry_after_is_honoured_within_bounds():
    assert next_delay(3, 1.0, retry_after_s=20) == 20  # sooner than the schedule's 30 min: as asked
    assert next_delay(1, 1.0, retry_after_s=0) == 5  # never sooner than the first retry
    assert next_delay(1, 1.0, retry_after_s=10**9) == 3600  # at most an hour
    assert parse_retry_after("120") == 120
    assert (
        parse_retry_after(format_datetime(datetime.fromtimestamp(1000 + 90, timezone.utc), usegmt=True), now=1000) == 90
    )
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None and parse_retry_after("") is None


def test_disabled_after_the_bound_scaled():
    assert not due_to_disable(432_000 - 1, 432_000, 1.0)
    assert due_to_disable(432_000, 432_000, 1.0)
    assert due_to_disable(0.9, 432_000, 0.000002)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "240.0.0.1",
    ],
)
def test_a_non_public_address_is_refused(address):
    assert address_refusal(address) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "93.184.216.34"])
def test_a_public_address_is_allowed(address):
    assert address_refusal(address) is None


def test_urls_refused_before_any_lookup():
    for url, why in [
        ("ftp://example.com/x", "http:// or https://"),
        ("http://user:pw@example.com/", "user name or password"),
        ("http:///nohost", "no host"),
        ("http://example.com:99999/", "port"),
        ("hTTP://ho]st/", "not valid"),
        ("http://[::1/", "not valid"),
    ]:
        with pytest.raises(TargetRefused, match=why):
            host_and_port(url)
    with pytest.raises(TargetRefused, match="169.254.169.254 is a link-local address"):
        check_literal("http://169.254.169.254/latest/meta-data")
    with pytest.raises(TargetRefused, match="169.254.169.254 is a link-local address"):
        check_literal("http://169.254.169.254/", opened=OpenTargets.parse("loopback"))
    check_literal("http://10.1.2.3/", opened=OpenTargets.parse("10.1.0.0/16"))
    check_literal("https://hooks.example.com/")  # a name: the resolver checks it


#: What `tickerwire up` opens (services/cli/up/command.py sets it; the dispatcher, the operator's
#: `webhooks register` and a partner's registration all judge a URL by it). Checked against the
#: rule itself: nothing is ever sent to these addresses.
UP_OPENS = "loopback"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://10.0.0.1/hook", "a private address"),
        ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
        ("http://[fc00::1]/hook", "a private address"),
        ("http://[::ffff:10.0.0.1]/hook", "a private address"),
        ("http://0.0.0.0:9999/hook", "an unspecified address"),
        ("http://224.0.0.1/hook", "a multicast address"),
    ],
)
async def test_up_opens_loopback_only(url, why):
    with pytest.raises(TargetRefused, match=why):
        await check_url(url, opened=OpenTargets.parse(UP_OPENS))


@pytest.mark.parametrize("url", ["http://127.0.0.1:9999/hook", "http://127.8.9.10/hook", "http://[::1]:9999/hook"])
async def test_up_accepts_a_receiver_on_loopback(url):
    await check_url(url, opened=OpenTargets.parse(UP_OPENS))
    with pytest.raises(TargetRefused, match="a loopback address"):
        await check_url(url)  # a deployment opens nothing by default


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ("0.0.0.0/0", "wider than a /8"),
        ("::/0", "wider than a /32"),
        ("10.0.0.0/7", "wider than a /8"),
        ("169.254.0.0/16", "the cloud metadata address 169.254.169.254"),
        ("fd00:ec2::/64", "the cloud metadata address fd00:ec2::254"),
        ("everything", "neither `loopback` nor a CIDR range"),
        ("10.0.0.1/8", "neither `loopback` nor a CIDR range"),  # host bits set: a typo, not a range
    ],
)
def test_an_open_setting_never_opens_everything_nor_the_metadata_address(setting, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        OpenTargets.parse(setting)


def test_an_open_setting_names_what_it_opens():
    opened = OpenTargets.parse("loopback, 10.20.0.0/16")
    assert str(opened) == "127.0.0.0/8,::1/128,10.20.0.0/16" and str(OpenTargets.parse("")) == "nothing"
    assert address_refusal("10.20.3.4", opened) is None and address_refusal("10.21.0.1", opened) == "a private address"
    assert address_refusal("::ffff:127.0.0.1", opened) is None  # an IPv4-mapped loopback is loopback


def _endpoint(generation: int, rotated_at: datetime | None) -> Endpoint:
    return Endpoint(
        "whe_abcd", 2, "ws", "https://x", EVERYTHING, "active", generation, rotated_at, None, None, 0, False
    )


def test_a_rotation_signs_with_both_secrets_within_its_window_only():
    rotated = _endpoint(2, NOW)
    assert rotated.secrets(KEY, 3600, NOW + timedelta(minutes=59)) == [
        derive_secret(KEY, "whe_abcd", 2),
        derive_secret(KEY, "whe_abcd", 1),
    ]
    assert rotated.secrets(KEY, 3600, NOW + timedelta(minutes=60)) == [derive_secret(KEY, "whe_abcd", 2)]
    assert _endpoint(1, None).secrets(KEY, 3600, NOW) == [derive_secret(KEY, "whe_abcd", 1)]


def test_secrets_differ_by_endpoint_generation_and_key_and_sign_the_exact_bytes():
    a = derive_secret(KEY, "whe_abcd", 1)
    assert (
        len(
            {
                a,
                derive_secret(KEY, "whe_abcd", 2),
                derive_secret(KEY, "whe_abce", 1),
                derive_secret(b"k" * 32, "whe_abcd", 1),
            }
        )
        == 4
    )
    assert secret_text(a).startswith("whsec_")
    h = headers("msg_1", 1_700_000_000, b'{"a":1}', [a, derive_secret(KEY, "whe_abcd", 2)])
    assert h["webhook-id"] == "msg_1" and h["webhook-timestamp"] == "1700000000"
    assert h["webhook-signature"].split(" ")[0] == signature(a, "msg_1", 1_700_000_000, b'{"a":1}')
    assert signature(a, "msg_1", 1_700_000_000, b'{"a": 1}') != signature(a, "msg_1", 1_700_000_000, b'{"a":1}')


def test_a_dispatcher_whose_rounds_stopped_says_so():
    from tickerwire.services.webhooks.dispatcher import Dispatcher

    d = Dispatcher.__new__(Dispatcher)
    d.last_round, d.last_error = 0.0, None
    assert d.stalled(10) == "no scheduling round completed yet"
    d.last_round, d.last_error = time.time() - 30, "read webhook endpoints: ConnectionRefusedError: [Errno 111]"
    assert d.stalled(10).startswith("no scheduling round for 30 s: read webhook endpoints: ConnectionRefusedError")
    d.last_round = time.time()
    assert d.stalled(10) is None


@pytest.mark.parametrize(
    "url", ["http://\x8e.example/hook", "http://a\x9ab.example/", "http://" + "a" * 64 + ".example/"]
)
async def test_a_host_no_resolver_could_answer_is_refused_not_an_error(url):
    # IDNA refuses these labels (a control character, a label over 63 octets): a refusal, never a 500.
    with pytest.raises(TargetRefused, match="not a valid host name"):
        await check_url(url)
