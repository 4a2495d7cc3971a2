"""The deployment dies mid-level: requests sent = recorded, the ones in flight failed with their class, the
level marked incomplete, what was measured before kept, teardown complete, a non-zero exit, and the summary
and `make report` say what happened. The compare says which side failed."""

from __future__ import annotations

import json
import signal

import psutil
import pytest

from harness.cli.main import main
from harness.schemas import CompareSummary
from tests.faults.conftest import Layerbench, lines, meta, phase_is, run_dir, wait_for

pytestmark = pytest.mark.slow  # the fault suite runs in `make test`; `make test-fast` skips it


def test_engine_killed_mid_level(tmp_path, quick_profile, capsys):
    profile = quick_profile(concurrency=[1, 4], requests=40)
    results = tmp_path / "r"
    # the engine SIGKILLs its own process group when request 60 arrives: c=1 done (41 with its warmup), c=4 mid-way
    rc = main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(results),
               "--opt", "ttft_ms=20", "--opt", "itl_ms=5", "--opt", "die_after=60"])
    assert rc == 2
    run = run_dir(results)
    m = meta(run)
    assert m["status"] == "failed" and "stopped at c=4" in m["reason"] and "sim exited (code -9)" in m["reason"]
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "failed" and "c=4" in s["stopped"]
    first, second = s["levels"]
    assert first["incomplete"] is None and first["stats"]["succeeded"] == 40  # kept as measured
    assert second["incomplete"] and "deployment died" in second["incomplete"]
    recorded = [r for r in lines(run / "requests.jsonl") if r["phase"] == "measure" and r["level"] == 4]
    assert len(recorded) == second["sent"]  # sent = recorded
    errors = {r["error"] for r in recorded if not r["ok"]}
    assert errors and errors <= {"disconnect", "connect", "aborted"}, errors
    assert second["stats"]["errors"] == {e: sum(r["error"] == e for r in recorded) for e in errors}
    assert "STOPPED EARLY" in (run / "summary.md").read_text()
    for pid in m["deployments"]["sim"]["pids"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    capsys.readouterr()
    assert main(["report", "--results-dir", str(results), "--out", str(tmp_path / "summary.md")]) == 0
    assert "failed" in (tmp_path / "summary.md").read_text()


def test_layer_dies_while_the_baseline_is_fine(tmp_path, quick_profile):
    profile = quick_profile(concurrency=[1, 4], requests=20)
    rc = main(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--pairs", "1",
               "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "reports"),
               "--opt", "ttft_ms=20", "--opt", "itl_ms=5", "--opt", "proxy_die_after=30"])
    assert rc == 2
    run = run_dir(tmp_path / "r")
    s = CompareSummary.model_validate_json((run / "compare.json").read_text())
    assert s.status == "failed" and set(s.failures) == {"stack"} and "sim-proxy exited" in s.failures["stack"]
    assert [lv.stats.concurrency for lv in s.runs["baseline"].levels] == [1, 4]  # the baseline is whole
    md = (tmp_path / "reports" / run.name / "report.md").read_text()
    assert "**stack failed**" in md and "level stopped early" in md


def test_a_layer_that_dies_in_its_first_pair_ends_the_compare_with_what_was_paired(tmp_path, quick_profile):
    profile = quick_profile(concurrency=[1, 4], requests=20)
    rc = main(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--pairs", "3",
               "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "reports"),
               "--opt", "ttft_ms=20", "--opt", "itl_ms=5", "--opt", "proxy_die_after=30"])
    assert rc == 2
    run = run_dir(tmp_path / "r")
    assert list(meta(run)["deployments"]) == ["baseline pair 1", "stack pair 1"]  # no deployment after it
    s = CompareSummary.model_validate_json((run / "compare.json").read_text())
    assert set(s.failures) == {"stack"} and s.failures["stack"].startswith("pair 1: ")
    assert {lv.pair for lv in s.runs["baseline"].levels} == {0}
    assert "**stack failed**: pair 1: " in (tmp_path / "reports" / run.name / "report.md").read_text()


def test_baseline_dies_while_the_layer_is_fine(tmp_path, quick_profile):
    profile = quick_profile(concurrency=[1, 4], requests=400)
    results = tmp_path / "r"
    lb = Layerbench(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--pairs", "1",
                     "--results-dir", str(results), "--reports-dir", str(tmp_path / "reports"),
                     "--opt", "ttft_ms=20", "--opt", "itl_ms=5"], tmp_path)
    run = wait_for("the baseline's first level", phase_is(results, "baseline: c=1"), lb)
    wait_for("measured requests", lambda: any(r["phase"] == "measure" for r in lines(run / "requests.jsonl")), lb)
    engine = meta(run)["deployments"]["baseline"]["pids"][0]
    psutil.Process(engine).send_signal(signal.SIGKILL)
    assert lb.wait() == 2, lb.output()
    s = json.loads((run / "compare.json").read_text())
    assert s["status"] == "failed" and set(s["failures"]) == {"baseline"}
    assert "baseline sim failed" in lb.output() and "sim exited (code -9)" in lb.output()
    assert "stack" not in meta(run).get("deployments", {})  # the layer was never deployed
