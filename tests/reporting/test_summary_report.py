"""`make report`'s cross-run summary: the CSV is every measured window of every compare, one row per (run, side,
level, repeat); each stack's answer is its latest complete compare per profile and engine version, never an
average across runs; the HTML is one self-contained file; damaged folders are named and never fatal.

The results folders are written from the pydantic models directly (no deployment): figures are chosen so that
an average across runs, or across profiles or versions, would show."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.deltas import level_deltas
from harness.cli.main import main
from harness.reporting.results_frame import ID_COLUMNS, compare_frame
from harness.reporting.summary_report import latest_compares, level_figures, write_summary
from harness.schemas import (
    SLA,
    AppliedConfig,
    CapacityResult,
    CapacitySummary,
    ClientHealth,
    CompareSummary,
    Dist,
    LevelStats,
    LevelSummary,
    RunSummary,
    ServerLevelMetrics,
)

# (run id, stack, profile, engine version, {level: (baseline tok/s, stack tok/s)}, compare status)
QUICK_OLD = ("20260101-100000-compare-ray-aaaaaa", "ray", "quick", "0.8.5", {1: (100, 90), 4: (400, 300)}, "complete")
QUICK_NEW = ("20260102-100000-compare-ray-bbbbbb", "ray", "quick", "0.8.5", {1: (100, 99), 4: (400, 396)}, "complete")
TRITON = ("20260102-110000-compare-triton-cccccc", "triton", "quick", "0.8.5", {1: (100, 80), 4: (400, 200)},
          "complete")
OTHER_PROFILE = ("20260102-120000-compare-ray-dddddd", "ray", "default", "0.8.5", {8: (800, 600)}, "complete")
OTHER_VERSION = ("20260102-130000-compare-ray-eeeeee", "ray", "quick", "0.9.0", {1: (100, 50), 4: (400, 100)},
                 "complete")
OPEN_LOOP = ("20260102-140000-compare-kserve-ffffff", "kserve", "poisson", "0.8.5", {2.0: (50, 49), 8.0: (200, 180)},
             "complete")
FAILED_NEWEST = ("20260109-000000-compare-ray-999999", "ray", "quick", "0.8.5", {1: (100, 10)}, "failed")
COMPARES = [QUICK_OLD, QUICK_NEW, TRITON, OTHER_PROFILE, OTHER_VERSION, OPEN_LOOP, FAILED_NEWEST]
REPEATS = 2
SPREAD = 0.02  # the repeats of a side sit at tok/s x (1 -/+ SPREAD)


def _stats(level: float, repeat: int, tok_s: float, open_loop: bool) -> LevelStats:
    d = Dist(n=10, mean=tok_s / 10, p50=tok_s / 10, p90=tok_s / 8, p95=tok_s / 7, p99=tok_s / 6, max=tok_s / 5)
    return LevelStats(concurrency=0 if open_loop else int(level), rate=float(level) if open_loop else None,
                      repeat=repeat, sent=10, succeeded=9, failed=1, errors={"timeout": 1}, wall_s=10.0,
                      output_tokens=int(tok_s * 10), throughput_tok_s=tok_s, request_rate=1.0, goodput=0.9,
                      good_rps=0.9, ttft_ms=d, itl_ms=d, tpot_ms=d, e2e_ms=d, tokens_per_chunk=1.0,
                      dispatch_delay_ms=Dist())


def _side(run_id: str, label: str, stack: str, profile: str, version: str,
          levels: dict[float, tuple[float, float]]) -> RunSummary:
    run = RunSummary(run_id=run_id, label=label, stack=stack, engine_version=version, applied=AppliedConfig(),
                     profile=profile, status="complete")
    open_loop = any(isinstance(x, float) for x in levels)
    health = ClientHealth(cpu_pct=20.0, loop_lag_ms=Dist(), dispatch_delay_ms=Dist())
    for repeat in range(REPEATS):
        for level, (b, s) in levels.items():
            tok = (b if label == "baseline" else s) * (1 - SPREAD if repeat == 0 else 1 + SPREAD)
            cpu = {"engine": 5.0, **({} if label == "baseline" else {f"{stack} proxy": 2.0})}
            run.add(LevelSummary(stats=_stats(level, repeat, tok, open_loop), client=health, process_cpu_s=cpu,
                                 window_s=10.0, server=ServerLevelMetrics(running_max=float(level))))
    return run


def write_compare(results: Path, spec: tuple) -> None:
    run_id, stack, profile, version, levels, status = spec
    runs = {label: _side(run_id, label, "vllm" if label == "baseline" else stack, profile, version, levels)
            for label in ("baseline", "stack")}
    open_loop = any(isinstance(x, float) for x in levels)
    s = CompareSummary(run_id=run_id, stack=stack, baseline_stack="vllm", in_request_path=True, profile=profile,
                       repeats=REPEATS, versions={"baseline": version, "stack": version}, version_match=True,
                       applied={}, settings_match=True, settings_mismatches=[], options={}, status=status, runs=runs,
                       levels=level_deltas(runs["baseline"], runs["stack"], list(levels), open_loop))
    d = results / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"command": "compare", "status": status, "stack": {"stack": stack}}))
    (d / "compare.json").write_text(s.model_dump_json())
    (d / "requests.jsonl").write_text('{"ok": true}\n')


def write_capacity(results: Path, run_id: str, stack: str, profile: str, version: str, value: int,
                   shape: str | None = None) -> None:
    sla = SLA(ttft_p95_s=1.0)
    s = CapacitySummary(run_id=run_id, stack=stack, shape=shape, profile=profile, status="complete", sla=sla,
                        scrape_policy="x",
                        versions={"stack": version},
                        capacity=CapacityResult(label="stack", stack=stack, kind="concurrency", sla=sla,
                                                max_concurrency=value))
    d = results / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"command": "capacity", "status": "complete", "stack": stack}))
    (d / "summary.json").write_text(s.model_dump_json())
    (d / "requests.jsonl").write_text('{"ok": true}\n')


@pytest.fixture
def results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    for spec in COMPARES:
        write_compare(results, spec)
    write_capacity(results, "20260103-000000-capacity-ray-121212", "ray", "quick", "0.8.5", 3)
    # another shape of the same stack: not the compared one, so it marks nothing
    write_capacity(results, "20260103-000001-capacity-ray-343434", "ray", "quick", "0.9.0", 7, "2 ingress replicas")
    cut = results / "20260104-000000-compare-ray-cut000"
    write_compare(results, (cut.name, *QUICK_NEW[1:]))
    text = (cut / "compare.json").read_text()
    (cut / "compare.json").write_text(text[: len(text) // 2])
    (results / "empty").mkdir()
    return results


def test_csv_has_one_row_per_run_side_level_repeat(results, tmp_path):
    r = write_summary(results, tmp_path / "reports")
    frame = pd.read_csv(r.csv)
    assert list(frame.columns[: len(ID_COLUMNS)]) == ID_COLUMNS
    for col in ("sent", "succeeded", "failed", "errors_timeout", "wall_s", "output_tokens", "throughput_tok_s",
                "request_rate", "goodput", "good_rps", "ttft_p95_ms", "itl_p50_ms", "tpot_p99_ms", "e2e_max_ms",
                "tokens_per_chunk", "steady", "running_max", "kv_cache_usage_max", "preemptions", "cpu_engine",
                "cpu_ray_proxy", "cpu_deployment", "client_cpu_cores", "delta_pct", "ci_lo_pct", "ci_hi_pct",
                "verdict", "incomplete"):
        assert col in frame.columns, col
    expected = sum(2 * len(spec[4]) * REPEATS for spec in COMPARES)  # the cut compare has no rows
    assert len(frame) == r.windows == expected
    assert not frame.duplicated(["run_id", "side", "level", "repeat"]).any()
    assert set(frame["run_id"]) == {spec[0] for spec in COMPARES}
    # a level's verdict is the compare's, the same on both sides' rows
    assert (frame.groupby(["run_id", "level"])["verdict"].nunique() == 1).all()
    # the raw windows, not means: each repeat's own tok/s
    rows = frame[(frame.run_id == QUICK_NEW[0]) & (frame.side == "stack") & (frame.level == 4)]
    assert sorted(rows["throughput_tok_s"]) == pytest.approx([396 * (1 - SPREAD), 396 * (1 + SPREAD)])
    assert rows["cpu_deployment"].tolist() == pytest.approx([0.7, 0.7])  # (5 + 2) CPU s over a 10 s window
    assert frame[frame.side == "baseline"]["cpu_ray_proxy"].isna().all()


def test_latest_per_stack_profile_and_version_is_the_newest_complete_run(results, tmp_path):
    frame = compare_frame(results)
    latest = latest_compares(frame)
    picked = {(r.compared_stack, r.profile, r.engine_version): r.run_id for r in latest.itertuples()}
    assert picked == {("ray", "quick", "0.8.5"): QUICK_NEW[0],  # newer than QUICK_OLD; FAILED_NEWEST is not complete
                      ("ray", "default", "0.8.5"): OTHER_PROFILE[0], ("ray", "quick", "0.9.0"): OTHER_VERSION[0],
                      ("triton", "quick", "0.8.5"): TRITON[0], ("kserve", "poisson", "0.8.5"): OPEN_LOOP[0]}


def test_means_stay_within_one_run(results):
    levels = level_figures(compare_frame(results)).set_index(["run_id", "level"])
    # QUICK_OLD (300) and OTHER_VERSION (100) share stack, profile or level with QUICK_NEW: none of them leaks in
    assert levels.loc[(QUICK_NEW[0], 4), "stack_throughput_tok_s"] == pytest.approx(396)
    assert levels.loc[(QUICK_NEW[0], 4), "baseline_throughput_tok_s"] == pytest.approx(400)
    assert levels.loc[(OTHER_VERSION[0], 4), "stack_throughput_tok_s"] == pytest.approx(100)
    assert levels.loc[(QUICK_OLD[0], 4), "delta_pct"] == pytest.approx(-25)
    assert levels.loc[(OTHER_PROFILE[0], 8), "delta_pct"] == pytest.approx(-25)


def test_documents_name_every_stack_inline_the_chart_and_list_damage(results, tmp_path):
    out = tmp_path / "reports"
    r = write_summary(results, out)
    assert r.markdown == out / "summary.md" and r.html == out / "summary.html" and r.chart == out / "summary-delta.png"
    md, page = r.markdown.read_text(), r.html.read_text()
    for stack in ("ray", "triton", "kserve"):
        assert f"## {stack}: latest compare per profile" in md
        assert f"**{stack}** · profile" in md
    # every (stack, profile, version) answer is its own line, with its own delta
    ray = {(a.profile, a.engine_version): a for a in r.latest if a.stack == "ray"}
    assert ray[("quick", "0.8.5")].delta_pct == pytest.approx(-1) and ray[("quick", "0.8.5")].run_id == QUICK_NEW[0]
    assert ray[("quick", "0.9.0")].delta_pct == pytest.approx(-75)
    assert ray[("default", "0.8.5")].level_text == "c=8"
    assert ray[("quick", "0.8.5")].capacity == "c=3" and "capacity c=3" in md  # same stack, profile and version
    assert ray[("quick", "0.9.0")].capacity is None  # its only capacity run measured another shape
    kserve = next(a for a in r.latest if a.stack == "kserve")
    assert kserve.level_text == "8 req/s" and kserve.delta_pct == pytest.approx(-10)
    # self-contained: the chart travels inside the page
    assert "data:image/png;base64," in page and "src='summary-delta.png'" not in page
    assert r.chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the every-run table and the damage, as details
    assert "## Every run" in md and FAILED_NEWEST[0] in md and QUICK_OLD[0] in md
    assert "## Skipped or damaged" in md and "<details><summary>Skipped or damaged" in page
    cut = results / "20260104-000000-compare-ray-cut000"
    assert f"| {cut} | compare.json is not valid JSON" in md
    assert f"| {results / 'empty'} | empty folder; skipped |" in md
    assert len(r.problems) == 2


def test_report_command(results, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["report", "--results-dir", str(results), "--out-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "latest complete compare" in printed and QUICK_NEW[0] in printed and QUICK_OLD[0] not in printed
    assert "-1.0% at c=4" in printed
    assert "skipped or damaged (2):" in printed and "(10 runs, 2 folders skipped or flagged):" in printed
    for name in ("summary.md", "summary.html", "summary.csv", "summary-delta.png"):
        assert (out / name).is_file() and f"  {out / name}\n" in printed

    # --out FILE.md, as before: the other files go beside it, named after it
    assert main(["report", "--results-dir", str(results), "--out", str(tmp_path / "all.md")]) == 0
    assert {p.name for p in tmp_path.glob("all*")} == {"all.md", "all.html", "all.csv", "all-delta.png"}


def test_nothing_to_report_is_still_exit_0(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["report", "--results-dir", str(tmp_path / "nowhere"), "--out-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "nowhere: no such folder" in printed and "no run could be reported" in printed
    assert "No run under" in (out / "summary.md").read_text()
    assert not (out / "summary-delta.png").exists()
    assert pd.read_csv(out / "summary.csv").empty

    (tmp_path / "results" / "empty").mkdir(parents=True)
    r = write_summary(tmp_path / "results", out)
    assert r.rows == [] and r.latest == [] and r.chart is None and "empty folder" in r.problems[0]


def test_a_serve_folder_is_listed_as_served_not_measured(tmp_path):
    """`layerbench serve` leaves a run folder (run.json, logs) and no summary: the all-stacks table names what it
    was instead of '?'."""
    import json

    from harness.reporting.catalog import read_run
    from harness.reporting.summary_report import all_stacks_rows

    run = tmp_path / "20261203-082230-serve-ray-c0480e"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "command": "serve", "stack": "ray",
                                              "status": "complete", "started": "2026-12-03T08:22:30"}))
    entry, problems = read_run(run)
    assert entry is not None, problems
    (row,) = all_stacks_rows([entry])
    assert row[0] == "ray" and row[3] == "— (served, not measured)"
