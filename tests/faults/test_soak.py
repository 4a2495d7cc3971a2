"""The CI version of `make soak`: 60 s at c=64 against the reference engine with every scheduled fault."""

from __future__ import annotations

import json

import pytest

from harness.cli.main import main
from harness.procedures.soak import EXPECTED_ERRORS, EXPECTED_GAPS

pytestmark = [pytest.mark.slow, pytest.mark.cost(60)]


def test_soak_60s_loses_nothing(tmp_path):
    rc = main(["soak", "--duration", "60", "--results-dir", str(tmp_path / "r"), "--out-dir", str(tmp_path / "o")])
    r = json.loads((tmp_path / "o" / "soak.json").read_text())
    assert rc == 0, r["problems"]
    assert r["sent"] == r["recorded"] == r["on_disk"] > 1000  # zero lost records
    assert all(r["failed_by_class"].get(k) for k in EXPECTED_ERRORS), r["failed_by_class"]
    assert all(r["gaps_by_reason"].get(k) for k in EXPECTED_GAPS), r["gaps_by_reason"]
    assert r["restarts"] == 1 and r["ok_after_restart"] > 0
    assert len(r["events"]) == 8 and not any("FAILED" in e for e in r["events"])
    md = (tmp_path / "o" / "soak.md").read_text()
    assert "passed" in md and "lost 0" in md
