"""Ports handed to servers come from below the kernel's ephemeral range, so that no outgoing
connection of a busy machine takes one between the probe and the server's bind."""

from __future__ import annotations

import socket

import pytest

from tickerwire.devstack.embedded import ports


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low, _ = ports.ephemeral_range()
    for _ in range(50):
        port = ports.free_port()
        assert ports.LOWEST_PORT <= port < low
        with socket.socket() as sock:
            sock.bind((ports.LOCALHOST, port))


def test_a_port_someone_holds_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    real_randint = ports.random.randint
    picks: list[int] = []

    def first_the_held_port(low: int, high: int) -> int:
        # The first pick is the held port; later ones are real picks, because no port next
        # to it can be promised free on a machine where other workers open connections.
        picks.append(taken if not picks else real_randint(low, high))
        return picks[-1]

    with socket.socket() as held:
        held.bind((ports.LOCALHOST, 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (taken + 2000, taken + 3000))
        monkeypatch.setattr(ports, "LOWEST_PORT", taken - 10)
        monkeypatch.setattr(ports.random, "randint", first_the_held_port)
        port = ports.free_port()
    assert picks[0] == taken
    assert len(picks) >= 2
    assert port != taken
    assert port == picks[-1]


def test_free_ports_are_distinct_even_when_a_pick_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    picks = iter([20001, 20001, 20002])
    monkeypatch.setattr(ports, "free_port", lambda host=ports.LOCALHOST: next(picks))
    assert ports.free_ports(2) == [20001, 20002]


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (ports.LOWEST_PORT + 10, 65000))
    assert ports.free_port() >= ports.LOWEST_PORT + 10
