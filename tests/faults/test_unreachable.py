"""A server that is not ours (`STACK=endpoint`) dies mid-run: the level stops once every request for 10 s
failed to connect (slots back off instead of firing thousands of refused connections a second), everything
sent is recorded, and the run ends failed, not complete."""

from __future__ import annotations

import json

import pytest

from harness.cli.main import main
from stacks.base import DeploySettings
from stacks.sim import SimStack
from tests.faults.conftest import Layerbench, lines, meta, phase_is, wait_for

pytestmark = pytest.mark.slow


def test_endpoint_server_dies_mid_run(tmp_path, quick_profile):
    results = tmp_path / "r"
    server = SimStack(DeploySettings(log_dir=tmp_path / "sim", options={"ttft_ms": 20, "itl_ms": 5}))
    with server:
        server.deploy()
        server.wait_ready(60)
        lb = Layerbench(["run", "--stack", "endpoint", "--url", server.endpoint().base_url, "--profile",
                         str(quick_profile(concurrency=[4], requests=100000)), "--results-dir", str(results)],
                        tmp_path)
        run = wait_for("the level", phase_is(results, "endpoint: c=4"), lb)
        wait_for("measured requests", lambda: len(lines(run / "requests.jsonl")) > 20, lb)
        server.teardown()
    rc = lb.wait(timeout=90)
    assert rc == 2, lb.output()
    m = meta(run)
    assert m["status"] == "failed" and "server unreachable" in m["reason"]
    recorded = [r for r in lines(run / "requests.jsonl") if r["phase"] == "measure"]
    connect = [r for r in recorded if r["error"] == "connect"]
    assert connect and len(connect) < 400  # backed off: 4 slots, at most ~1 attempt a second each after 1 s
    level = json.loads((run / "summary.json").read_text())["levels"][-1]
    assert level["sent"] == len(recorded) and "server unreachable" in level["incomplete"]
    assert main(["report", "--results-dir", str(results), "--out", str(tmp_path / "s.md")]) == 0
