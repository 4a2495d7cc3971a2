"""A deployment's ports are chosen below the kernel's ephemeral range, so no process's bind(0) (vLLM's engine
picks its own ports so) takes one between our choice and the server's bind; a port held, or already chosen for
the same deployment, is never handed out."""

from __future__ import annotations

import random
import socket

from stacks.base import procs
from stacks.base.procs import free_port


def test_ports_come_from_below_the_ephemeral_range_and_differ_from_those_taken():
    low = procs._ephemeral_low()
    first = free_port()
    picks = [free_port(first) for _ in range(50)]
    assert first not in picks
    if low > 11_000:
        assert all(10_000 <= p < low for p in [first, *picks]), (low, picks)


def test_a_held_or_taken_port_is_skipped(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        order = iter([busy, 23_456, 23_457])
        monkeypatch.setattr(procs, "_ephemeral_low", lambda: 65_000)
        monkeypatch.setattr(random.Random, "randrange", lambda self, a, b: next(order))
        # the held port is refused, then 23456 as taken, then 23457 (free unless this host holds it)
        got = free_port(23_456)
        assert got != busy and got != 23_456
