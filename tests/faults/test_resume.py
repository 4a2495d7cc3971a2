"""`compare --resume`: an interrupted compare continues after its last complete level and repeat; the report
says which invocation measured each level; a changed setting or a complete run is refused with the reason."""

from __future__ import annotations

import signal

import pytest

from harness.cli.main import main
from harness.schemas import CompareSummary
from tests.faults.conftest import Layerbench, lines, meta, phase_is, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.alone]  # alone: 30 ms per request found as an overhead


def test_interrupted_compare_resumes_where_it_stopped(tmp_path, quick_profile, capsys):
    results, reports = tmp_path / "r", tmp_path / "reports"
    profile = quick_profile(concurrency=[1, 4], requests=40)
    lb = Layerbench(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--pairs", "2",
                     "--results-dir", str(results), "--reports-dir", str(reports), "--opt", "ttft_ms=20",
                     "--opt", "itl_ms=5", "--opt", "request_delay_ms=30"], tmp_path)
    run = wait_for("the stack's second level in the first pair", phase_is(results, "stack: c=4"), lb)
    lb.signal_group(signal.SIGTERM)
    assert lb.wait() == 130, lb.output()
    first = meta(run)
    assert first["status"] == "interrupted"
    baseline_pids = first["deployments"]["baseline pair 1"]["pids"]

    capsys.readouterr()
    assert main(["compare", "--resume", run.name, "--repeats", "3", "--results-dir", str(results)]) == 2
    assert "repeats: were 1, now 3" in capsys.readouterr().err  # settings must match

    assert main(["compare", "--resume", run.name, "--results-dir", str(results), "--reports-dir", str(reports)]) == 0
    m = meta(run)
    assert m["status"] == "complete" and len(m["invocations"]) == 1
    assert m["invocations"][0]["previous_status"] == "interrupted"
    assert m["deployments"]["baseline pair 1"]["pids"] == baseline_pids  # a complete deployment is not made again
    assert list(m["deployments"]) == ["baseline pair 1", "stack pair 1", "stack pair 2", "baseline pair 2"]
    s = CompareSummary.model_validate_json((run / "compare.json").read_text())
    assert s.status == "complete" and s.invocations == 2
    stack_levels = {(lv.stats.repeat, lv.stats.concurrency): lv.invocation for lv in s.runs["stack"].levels}
    assert stack_levels == {(0, 1): 0, (0, 4): 1, (1, 1): 1, (1, 4): 1}
    base_levels = {(lv.stats.repeat, lv.stats.concurrency): lv.invocation for lv in s.runs["baseline"].levels}
    assert base_levels == {(0, 1): 0, (0, 4): 0, (1, 1): 1, (1, 4): 1}
    assert [lv.invocations for lv in s.levels] == [[0, 1], [0, 1]]
    assert all(lv.verdict == "overhead" for lv in s.levels)  # 30 ms per request, found again across invocations
    md = (reports / run.name / "report.md").read_text()
    assert "measured in" in md and "first run, resume 1" in md and "2 invocations" in md
    # the requests of both invocations are on disk, each marked with its invocation
    assert {r["invocation"] for r in lines(run / "requests.jsonl")} == {0, 1}

    capsys.readouterr()
    assert main(["compare", "--resume", run.name, "--results-dir", str(results)]) == 2
    assert "already complete" in capsys.readouterr().err
