"""The compare report's plots (harness/reporting/plots.py, harness/reporting/plots_dist.py) from a small hand-built
summary, and the
per-request TTFT samples they read back from requests.jsonl (harness/analysis/samples.py)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import pytest

from harness.analysis.deltas import level_deltas
from harness.analysis.samples import ttft_samples
from harness.analysis.stats import level_stats
from harness.load.client import RequestRecord
from harness.profile.schema import SLO
from harness.reporting.plots import GOODPUT_YLIM, plots, series, side_labels
from harness.schemas import (
    AAReference,
    AppliedConfig,
    ClientHealth,
    CompareSummary,
    Dist,
    LevelSummary,
    RunSummary,
    ServerLevelMetrics,
)

MS = 1_000_000  # ns


def records(level: float, n: int, ttft_ms: float, e2e_ms: float, open_loop: bool = False) -> list[RequestRecord]:
    """n successful requests, 10 ms apart; every third one slower (two modes), one in ten failed."""
    out = []
    for i in range(n):
        t0 = (i + 1) * 10 * MS  # open loop: a t_task_ns of 0 would read as closed loop
        ttft = ttft_ms * (3 if i % 3 == 0 else 1)
        out.append(RequestRecord(level=level, index=i, ok=i % 10 != 9, error=None if i % 10 != 9 else "timeout",
                                 t_due_ns=t0, t_task_ns=t0 if open_loop else 0, t_start_ns=t0,
                                 t_end_ns=t0 + int(e2e_ms * MS), ttft_ms=ttft, e2e_ms=e2e_ms,
                                 event_ms=[ttft, ttft + 5, ttft + 10], output_tokens=8))
    return out


def run(label: str, levels: list[float], slow: float, open_loop: bool = False) -> RunSummary:
    r = RunSummary(run_id="r", label=label, stack=label, engine_version="0.32.0", applied=AppliedConfig(),
                   profile="p")
    health = ClientHealth(cpu_pct=30.0, loop_lag_ms=Dist(), dispatch_delay_ms=Dist())
    for rep in range(2):
        for c in levels:
            recs = records(c, 20, (20 + 5 * rep) * slow * (1 + c / 8), 60 * slow, open_loop)
            st = (level_stats(recs, 0, SLO(ttft_s=0.1), repeat=rep, rate=c) if open_loop
                  else level_stats(recs, int(c), SLO(ttft_s=0.1), repeat=rep))
            cpu = {"engine": 1.5 * c, "tiny helper": 0.01} | ({"proxy": 0.4 * c} if label == "stack" else {})
            r.add(LevelSummary(stats=st, client=health, process_cpu_s=cpu, window_s=1.0, server=ServerLevelMetrics()))
    return r


def summary(levels: list[float], open_loop: bool = False, stack: str = "ray", stack_levels: list[float] | None = None,
            **kw) -> CompareSummary:
    """stack_levels: the levels the stack measured (default: all), as when it died part way."""
    runs = {"baseline": run("baseline", levels, 1.0, open_loop),
            "stack": run("stack", levels if stack_levels is None else stack_levels, 1.3, open_loop)}
    return CompareSummary(run_id="t", stack=stack, baseline_stack="vllm", in_request_path=True, profile="p", repeats=2,
                   versions={"baseline": "0.32.0", "stack": "0.32.0"}, version_match=True, applied={},
                   settings_match=True, settings_mismatches=[], options={}, runs=runs,
                   levels=level_deltas(runs["baseline"], runs["stack"], levels, open_loop), **kw)


def assert_pngs(out: Path, names: list[str]) -> None:
    for name in names:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert mpimg.imread(out / name).shape[1] == 550, name  # two a row in the HTML report, at their own size


def test_closed_loop_figures_in_reading_order(tmp_path):
    s = summary([1, 4], slo=SLO(ttft_s=0.1), aa=AAReference(run_id="aa", levels={1: (0.5, 3.0, "within noise")}))
    ttfts = {"baseline": {1: [10.0, 12.0, 40.0], 4: [20.0, 60.0]}, "stack": {1: [15.0, 50.0]}}
    names = plots(s, tmp_path, ttfts)
    assert names == ["delta.png", "throughput.png", "ttft_p95.png", "goodput.png", "throughput_vs_ttft.png",
                     "ttft_cdf.png", "cpu_by_process.png"]
    assert_pngs(tmp_path, names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    assert plt.get_fignums() == []  # every figure closed


def test_goodput_is_plotted_in_percent_and_repeats_beside_the_mean():
    s = summary([1, 4])
    for side in ("baseline", "stack"):
        good = series(s, side, "goodput")
        assert [x for x, _, _ in good] == [1, 4]
        for (_, mean, reps), lv in zip(good, s.levels, strict=True):
            assert mean == pytest.approx(100 * getattr(lv, f"{side}_goodput"))
            assert len(reps) == 2 and all(0 <= v <= 100 for v in reps)
            assert GOODPUT_YLIM[0] <= 0 and GOODPUT_YLIM[1] >= 100
    tok = series(s, "stack", "tok_s")
    assert all(len(reps) == 2 and min(reps) <= mean <= max(reps) for _, mean, reps in tok)  # the mean of its repeats


def test_open_loop_keeps_latency_vs_rate_and_keys_by_rate(tmp_path):
    # the stack died before 32 req/s: that level has the baseline's figures only and no delta
    s = summary([2.0, 8.0, 32.0], open_loop=True, stack_levels=[2.0, 8.0], slo=SLO(ttft_s=0.5, e2e_s=0.2))
    assert s.open_loop and [x for x, _, _ in series(s, "baseline", "ttft_p95_ms")] == [2.0, 8.0, 32.0]
    assert series(s, "stack", "tok_s")[2][1:] == (None, []) and s.levels[2].delta_pct is None
    names = plots(s, tmp_path, {"baseline": {2.0: [5.0, 900.0]}, "stack": {8.0: [7.0]}})
    assert "latency_vs_rate.png" in names and "ttft_cdf.png" in names
    assert names.index("delta.png") < names.index("latency_vs_rate.png") < names.index("cpu_by_process.png")
    assert_pngs(tmp_path, names)


def test_legends_name_the_sides_with_versions_and_tell_aa_apart():
    assert side_labels(summary([1])) == ("baseline: vllm 0.32.0", "stack: ray (vLLM 0.32.0)")
    a, b = side_labels(summary([1], stack="vllm"))
    assert a != b and a.startswith("baseline: vllm") and b.startswith("stack: vllm")


def test_nothing_measured_draws_nothing(tmp_path):
    nothing = summary([1]).model_copy(update={"runs": {}, "levels": level_deltas(None, None, [1, 4])})
    assert all(lv.baseline_tok_s is None and lv.stack_ttft_p95_ms is None for lv in nothing.levels)
    assert plots(nothing, tmp_path, {"baseline": {}}) == []  # no figure drawn empty
    assert plots(nothing.model_copy(update={"levels": []}), tmp_path) == []
    assert list(tmp_path.iterdir()) == [] and plt.get_fignums() == []


def line(label: str, invocation: int = 0, **fields) -> str:
    rec = RequestRecord(level=fields.pop("level", 4), index=fields.pop("index", 0), ok=True, ttft_ms=10.0,
                        e2e_ms=50.0, t_due_ns=1_000 * MS, t_start_ns=1_000 * MS, t_end_ns=1_050 * MS)
    for k, v in fields.items():
        setattr(rec, k, v)
    return json.dumps(rec.to_json() | {"label": label, "invocation": invocation})


def test_ttft_samples_counts_measured_successful_requests(tmp_path):
    lines = [
        line("baseline", ttft_ms=11.0),
        line("baseline", ttft_ms=99.0, phase="warmup"),  # warmup: not measured
        line("baseline", ttft_ms=98.0, phase="warmup-sweep"),
        line("baseline", ttft_ms=97.0, ok=False, error="timeout"),  # failed: no TTFT to count
        line("stack", ttft_ms=12.0, level=1),
        "{not json",
        json.dumps({"label": "stack"}),  # not a record
        # open loop: sent 30 ms after its scheduled time, so its TTFT from the schedule is 30 ms longer
        line("stack", ttft_ms=5.0, level=8.0, t_due_ns=1_000 * MS, t_task_ns=1_030 * MS, t_start_ns=1_030 * MS),
        # c=16 repeat 0: the first invocation was left incomplete and a resume measured it again
        line("stack", 0, ttft_ms=500.0, level=16),
        line("stack", 1, ttft_ms=20.0, level=16),
        line("stack", 0, ttft_ms=21.0, level=16, repeat=1),
    ]
    (tmp_path / "requests.jsonl").write_text("\n".join(lines) + "\n")
    got = ttft_samples(tmp_path)
    assert got["baseline"] == {4: [11.0]}
    assert got["stack"][1] == [12.0] and got["stack"][8.0] == pytest.approx([35.0])
    assert sorted(got["stack"][16]) == [20.0, 21.0]
    assert isinstance(next(iter(got["baseline"])), int)  # closed-loop levels are concurrencies
    assert ttft_samples(tmp_path / "missing") == {}
