"""Which listening addresses count as beyond loopback: Ray's gRPC servers bound to 127.0.0.1 show up as the
IPv4-mapped ::ffff:127.0.0.1 of a dual-stack socket, and must not be reported as exposed."""

from __future__ import annotations

import pytest

from harness.analysis.audit import is_loopback


@pytest.mark.parametrize(("ip", "loopback"), [
    ("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("::ffff:127.0.0.1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.2", False), ("::ffff:192.0.2.2", False), ("fe80::1%eth0", False),
])
def test_is_loopback(ip, loopback):
    assert is_loopback(ip) is loopback
