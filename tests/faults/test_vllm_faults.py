"""The fault cases that are about vLLM itself, on the real CPU engine: its process group SIGKILLed mid-level
(like an OOM kill), and Ctrl-C while it starts. Nothing of it may survive, in the process table, /tmp or
/dev/shm (a killed vLLM leaves ~400 MB of psm_* segments and sem.mp-* semaphores there)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.faults.conftest import Layerbench, gone_within, left_behind, lines, meta, phase_is, shm_and_tmp, wait_for

# alone: asserts nothing new is left in /dev/shm or /tmp, where other tests' servers write
pytestmark = [pytest.mark.slow, pytest.mark.alone]
ENGINE = {"max_model_len": 1024, "max_num_seqs": 32, "dtype": "float32", "enforce_eager": True}


def _start(tmp_path, write_profile) -> tuple[Layerbench, set[str]]:
    """layerbench running bare vLLM at c=4 for up to 5 minutes, and /dev/shm and /tmp as they were before."""
    before = shm_and_tmp()
    profile = write_profile(concurrency=[4], requests=20, requests_per_concurrency=0, min_duration_s=300,
                            input_tokens=48, output_tokens=16, engine=ENGINE)
    return Layerbench(["run", "--stack", "vllm", "--profile", str(profile), "--results-dir",
                       str(tmp_path / "r")], tmp_path), before


def test_vllm_killed_mid_level(tmp_path, write_profile):
    results = tmp_path / "r"
    lb, before = _start(tmp_path, write_profile)
    run = wait_for("the level", phase_is(results, "vllm: c=4"), lb, timeout=600)
    wait_for("measured requests", lambda: sum(r["phase"] == "measure" for r in lines(run / "requests.jsonl")) >= 8,
             lb, timeout=300)
    pids = meta(run)["deployments"]["vllm"]["pids"]
    os.killpg(pids[0], signal.SIGKILL)  # the API server leads the group: engine core and worker go with it
    assert lb.wait(timeout=60) == 2, lb.output()
    m = meta(run)
    assert m["status"] == "failed" and "stopped at c=4" in m["reason"] and "vllm exited (code -9)" in m["reason"]
    level = json.loads((run / "summary.json").read_text())["levels"][0]
    assert "deployment died" in level["incomplete"]
    recorded = [r for r in lines(run / "requests.jsonl") if r["phase"] == "measure"]
    assert len(recorded) == level["sent"]  # sent = recorded
    failed = {r["error"] for r in recorded if not r["ok"]}
    assert failed and failed <= {"disconnect", "connect", "aborted"}, failed
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")
                and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    assert not left_behind(before), "vLLM's /dev/shm and /tmp files were left behind"


def test_ctrl_c_while_vllm_starts(tmp_path, write_profile):
    results = tmp_path / "r"
    lb, before = _start(tmp_path, write_profile)
    run = wait_for("vLLM starting", phase_is(results, "vllm: deploying"), lb, timeout=300)
    log = wait_for("vLLM's log", lambda: next((p for p in (run / "logs").glob("vllm-*.log")
                                               if p.stat().st_size > 2000), None), lb, timeout=300)
    started = wait_for("vLLM's processes", lb.descendants, lb)
    t0 = time.monotonic()
    lb.signal_group(signal.SIGINT)
    assert lb.wait(timeout=90) == 130, lb.output()
    assert not gone_within(started, 1.0)
    took = time.monotonic() - t0
    assert took < 30, f"took {took:.0f} s to stop (log: {log})"
    print(f"[vLLM start-up SIGINT] exit 130 and every process gone {took:.1f} s after the signal")
    assert "stopping vLLM" in lb.output() and "Traceback" not in lb.output()
    assert meta(run)["status"] == "interrupted"
    assert not left_behind(before), "vLLM's /dev/shm and /tmp files were left behind"
