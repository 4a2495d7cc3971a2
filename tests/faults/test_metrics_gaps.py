"""/metrics failing for part of a level (HTTP 500, a hang, garbage): every gap is counted with its reason,
shown in the summary, and the run goes on to its end."""

from __future__ import annotations

import json

import pytest

from harness.cli.main import main
from tests.faults.conftest import run_dir

pytestmark = pytest.mark.slow  # the fault suite runs in `make test`; `make test-fast` skips it


@pytest.mark.parametrize("fault,reason", [("500", "http 500"), ("hang", "timeout"), ("garbage", "unparsable")])
def test_metric_gaps_are_counted_by_reason_and_the_run_goes_on(tmp_path, quick_profile, fault, reason):
    profile = quick_profile(concurrency=[4], requests=40, scrape="interval", scrape_interval_s=0.25,
                            min_duration_s=1.5)
    results = tmp_path / "r"
    rc = main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(results),
               "--opt", "ttft_ms=20", "--opt", "itl_ms=5", "--opt", f"metrics_fault={fault}",
               "--opt", "metrics_fault_every=2"])
    run = run_dir(results)
    assert rc == 0 and run is not None
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "complete" and [lv["stats"]["concurrency"] for lv in s["levels"]] == [4]
    assert s["levels"][0]["stats"]["failed"] == 0  # the load never noticed
    assert s["scrape_gap_reasons"].get(reason, 0) >= 1, s["scrape_gap_reasons"]
    assert s["scrape_gaps"] == sum(s["scrape_gap_reasons"].values()) < s["scrapes"]  # the good ones were kept
    assert f"{reason} {s['scrape_gap_reasons'][reason]}" in (run / "summary.md").read_text()
