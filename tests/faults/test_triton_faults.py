"""Triton's Python stub (where vLLM runs) killed mid-level: Triton itself keeps running and answers every
request with an error, so the run must notice the model is gone, stop the level, mark the run failed with
what was measured kept, and leave no Triton process and no /dev/shm file behind."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from tests.faults.conftest import Layerbench, left_behind, lines, meta, phase_is, shm_and_tmp, wait_for

# alone: asserts nothing new is left in /dev/shm or /tmp, where other tests' servers write
pytestmark = [pytest.mark.slow, pytest.mark.alone]
ENGINE = {"max_model_len": 1024, "max_num_seqs": 32, "dtype": "float32", "enforce_eager": True}


def test_triton_stub_killed_mid_level(tmp_path, write_profile):
    results = tmp_path / "r"
    before = shm_and_tmp()
    profile = write_profile(concurrency=[4], requests=20, requests_per_concurrency=0, min_duration_s=300,
                            input_tokens=48, output_tokens=16, engine=ENGINE)
    lb = Layerbench(["run", "--stack", "triton", "--profile", str(profile), "--results-dir", str(results)], tmp_path)
    run = wait_for("the level", phase_is(results, "triton: c=4"), lb, timeout=600)
    wait_for("measured requests", lambda: sum(r["phase"] == "measure" for r in lines(run / "requests.jsonl")) >= 8,
             lb, timeout=300)
    pids = meta(run)["deployments"]["triton"]["pids"]
    stub = next(p for p in pids if psutil.Process(p).cmdline()[0].endswith("triton_python_backend_stub"))
    os.kill(stub, signal.SIGKILL)
    assert lb.wait(timeout=120) == 2, lb.output()
    m = meta(run)
    assert m["status"] == "failed" and "stopped at c=4" in m["reason"] and "Python stub" in m["reason"], m["reason"]
    summary = json.loads((run / "summary.json").read_text())
    level = summary["levels"][0]
    assert level["incomplete"] and "Python stub" in level["incomplete"]
    recorded = [r for r in lines(run / "requests.jsonl") if r["phase"] == "measure"]
    assert len(recorded) == level["sent"] and sum(r["ok"] for r in recorded) >= 8  # measured before is kept
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not left_behind(before), "Triton's /dev/shm or vLLM's /tmp files were left behind"


def test_a_model_that_fails_to_load_is_reported_with_its_status_and_log(tmp_path, monkeypatch):
    """A model whose initialize() raises: Triton stays up with the model UNAVAILABLE; the deployment fails with
    Triton's reason and the last lines of its log, and nothing is left running."""
    from harness.errors import LayerbenchError
    from stacks import triton
    from stacks.base import DeploySettings, triton_repo

    broken = tmp_path / "model.py"
    broken.write_text("class TritonPythonModel:\n    def initialize(self, args):\n"
                      "        raise RuntimeError('layerbench-test: this model cannot load')\n")
    monkeypatch.setattr(triton_repo, "MODEL_PY", broken)  # the repository is written from triton_repo's
    before = shm_and_tmp()
    stack = triton.TritonStack(DeploySettings(log_dir=tmp_path / "logs"))
    with pytest.raises(LayerbenchError) as e, stack:
        stack.deploy()
        stack.wait_ready(300)
    msg = str(e.value)
    assert "could not load model 'tiny'" in msg and "this model cannot load" in msg, msg
    assert "Last 40 lines of" in msg
    assert stack.proc is None  # torn down (teardown verifies the group and ports are gone)
    assert not left_behind(before)
