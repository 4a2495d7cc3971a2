"""A compare exported as llm-d Benchmark Reports v0.2.1 (harness/reporting/benchmark_report.py), each file read back
and validated by the llmd-benchmark-report package's own reader (core.py import_benchmark_report): from a small
hand-built compare whose figures are known, from a committed example report, and (slow) from a real compare of the
reference engine against the known-overhead proxy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llmd_benchmark_report import BenchmarkReportV02, import_benchmark_report

from harness.errors import LayerbenchError
from harness.profile.schema import LoadProfile
from harness.reporting.benchmark_report import export_benchmark_reports
from harness.schemas import CompareSummary
from tests.reporting.test_plots import line
from tests.reporting.test_report_decision import WIDE, compare, pair

ROOT = Path(__file__).resolve().parents[2]


def hand_built(run_dir: Path) -> CompareSummary:
    """c=1 alike on both sides in 2 pairs; c=4 in 3 pairs with the stack a fifth slower and its goodput 100% -> 50%
    in each (an overhead on goodput, as tests/reporting/test_report_decision.py builds it); run.json's profile and
    3 measured requests per window (prompt 30/31/32 tokens, 8 out) as the engine's usage counted them."""
    s = compare(pair(1, 100.0) + pair(4, 400.0, **WIDE), pair(1, 100.0) + pair(4, 320.0, ttft_p95=300.0, goodput=0.5,
                                                                           **WIDE))
    s.run_id, s.wall_s = run_dir.name, 61.5
    run_dir.mkdir(parents=True)
    (run_dir / "compare.json").write_text(s.model_dump_json())
    profile = LoadProfile(name="p", concurrency=[1, 4], input_tokens=32, output_tokens=8)
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": s.run_id, "started": "2026-12-03T06:50:28+0000", "finished": "2026-12-03T06:51:30+0000",
        "git": "abc1234", "profile": profile.model_dump(mode="json")}))
    lines = [line(side, level=level, repeat=repeat, index=i, prompt_tokens=30 + i, output_tokens=8)
             for side in ("baseline", "stack") for level in (1, 4) for repeat in range(2 if level == 1 else 3)
             for i in range(3)]
    (run_dir / "requests.jsonl").write_text("\n".join(lines) + "\n")
    return s


def read(path: Path) -> BenchmarkReportV02:
    br = import_benchmark_report(str(path))  # the package's reader: version detection and full validation
    assert isinstance(br, BenchmarkReportV02) and br.version == "0.2.1"
    return br


def block(br: BenchmarkReportV02) -> dict:
    return br.results.observability.model_extra["layerbench_compare"]


def test_each_side_and_level_is_a_report_the_package_validates(tmp_path):
    s = hand_built(tmp_path / "results" / "20261203-065027-compare-ray-abc123")
    paths = export_benchmark_reports(tmp_path / "results" / s.run_id, tmp_path / "out")
    assert [p.name for p in paths] == ["benchmark-report-baseline_0.yaml", "benchmark-report-stack_0.yaml",
                                       "benchmark-report-baseline_1.yaml", "benchmark-report-stack_1.yaml"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)  # no temp files
    reports = {p.name: read(p) for p in paths}
    uids = {br.run.uid for br in reports.values()}
    assert len(uids) == 4 and len({br.run.eid for br in reports.values()}) == 1
    top = s.levels[1]
    assert top.concurrency == 4 and top.verdict == "overhead" and top.delta_pct < -15  # what the fixture is for
    for stage, lv in enumerate(s.levels):
        for side in ("baseline", "stack"):
            br = reports[f"benchmark-report-{side}_{stage}.yaml"]
            agg = br.results.request_performance.aggregate
            # throughput is the compare's own per-side figure; TTFT p95 the one its verdict judged
            assert agg.throughput.output_token_rate.mean == pytest.approx(getattr(lv, f"{side}_tok_s"))
            assert agg.throughput.output_token_rate.units == "tokens/s"
            assert agg.latency.time_to_first_token.p95 == pytest.approx(getattr(lv, f"{side}_ttft_p95_ms"))
            assert agg.requests.total == 40 * (2 if lv.concurrency == 1 else 3)  # its windows of 40
            assert agg.requests.failures == 0
            assert agg.requests.input_length.mean == pytest.approx(31.0) and agg.requests.input_length.max == 32
            load = br.scenario.load.standardized
            assert (load.concurrency, load.stage, load.input_seq_len.value, load.output_seq_len.value) == (
                lv.concurrency, stage, 32, 8)
            assert load.tool == "layerbench" and load.tool_version == "abc1234"
            got = block(br)
            assert got["side"] == side and got["verdict"] == lv.verdict and got["level"] == f"c={lv.concurrency}"
            assert got["throughput_delta_pct"] == pytest.approx(lv.delta_pct)
            assert got["endpoints"]["throughput"]["verdict"] == lv.endpoints["throughput"].verdict
            assert got["sides"]["stack"]["tok_s"] == pytest.approx(lv.stack_tok_s)
            peer = reports[f"benchmark-report-{'stack' if side == 'baseline' else 'baseline'}_{stage}.yaml"]
            assert got["peer_uid"] == peer.run.uid
            engines = [c for c in br.scenario.stack if c.standardized.kind == "inference_engine"]
            assert len(engines) == 1 and engines[0].standardized.tool_version == "0.32.0"
            assert [c.standardized.tool for c in br.scenario.stack if c.standardized.kind == "generic"] == (
                ["ray"] if side == "stack" else [])
    top_block = block(reports["benchmark-report-stack_1.yaml"])
    assert top_block["why"] == "goodput" and top_block["endpoints"]["goodput"]["verdict"] == "overhead"
    assert top_block["sides"]["stack"]["goodput"] == pytest.approx(0.5)
    assert reports["benchmark-report-stack_1.yaml"].run.time.duration == "PT61.500S"


def test_a_record_the_schema_rejects_is_one_layerbench_error_and_nothing_is_written(tmp_path):
    run_dir = tmp_path / "results" / "r"
    s = hand_built(run_dir)
    d = json.loads((run_dir / "compare.json").read_text())
    for w in d["runs"]["stack"]["levels"]:
        w["stats"]["sent"] = -1  # layerbench's record takes it; the schema's request count must be >= 0
    (run_dir / "compare.json").write_text(json.dumps(d))
    with pytest.raises(LayerbenchError) as e:
        export_benchmark_reports(run_dir, tmp_path / "out")
    msg = str(e.value)
    assert f"the stack at c={s.levels[0].concurrency}" in msg and "llmd-benchmark-report" in msg
    assert "total" in msg and "greater than or equal to 0" in msg  # the validator's own words
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_folder_that_holds_no_compare_is_one_layerbench_error(tmp_path):
    (tmp_path / "compare.json").write_text('{"run_id": "x"}')
    with pytest.raises(LayerbenchError, match="cannot be read"):
        export_benchmark_reports(tmp_path, tmp_path / "out")
    with pytest.raises(LayerbenchError, match="not a compare"):
        export_benchmark_reports(tmp_path / "nothing", tmp_path / "out")


def test_a_committed_example_report_exports_its_throughput_and_verdicts(tmp_path):
    """A report folder keeps the compare's summary without its windows (summary.json): its reports carry the
    compare's throughput per side and its verdicts, and no latency statistics (the schema needs their mean)."""
    example = sorted((ROOT / "reports" / "examples").glob("*-compare-*"))[-1]
    s = CompareSummary.model_validate_json((example / "summary.json").read_text())
    paths = export_benchmark_reports(example, tmp_path / "out")
    assert len(paths) == 2 * len([lv for lv in s.levels if lv.baseline_tok_s is not None])
    first = read(tmp_path / "out" / "benchmark-report-stack_0.yaml")
    assert first.results.request_performance.aggregate.throughput.output_token_rate.mean == pytest.approx(
        s.levels[0].stack_tok_s)
    assert block(first)["verdict"] == s.levels[0].verdict and block(first)["run_id"] == s.run_id


@pytest.mark.slow  # a whole two-pair compare of the reference engine (~20 s)
@pytest.mark.alone
def test_a_real_compare_exports_the_proxys_overhead(tmp_path, write_profile):
    from harness.cli.main import main

    profile = write_profile(concurrency=[1, 4], requests=20, requests_per_concurrency=0, output_tokens=8,
                            input_tokens=32, scrape_interval_s=0.5, warmup_sweep=False)
    main(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--pairs", "2", "--opt", "ttft_ms=20",
          "--opt", "itl_ms=5", "--opt", "request_delay_ms=40", "--results-dir", str(tmp_path / "results"),
          "--reports-dir", str(tmp_path / "reports")])  # its exit code covers the report too: tested elsewhere
    run_dir = next((tmp_path / "results").iterdir())
    s = CompareSummary.model_validate_json((run_dir / "compare.json").read_text())
    assert s.status == "complete"
    paths = export_benchmark_reports(run_dir, tmp_path / "out")
    assert len(paths) == 4
    for stage, lv in enumerate(s.levels):
        base, stack = (read(tmp_path / "out" / f"benchmark-report-{side}_{stage}.yaml")
                       for side in ("baseline", "stack"))
        ttft = [br.results.request_performance.aggregate.latency.time_to_first_token.p50 for br in (base, stack)]
        assert ttft[1] - ttft[0] == pytest.approx(40, abs=15)  # the proxy's known delay
        assert block(stack)["verdict"] == lv.verdict and block(stack)["throughput_delta_pct"] == pytest.approx(
            lv.delta_pct)
        assert base.results.request_performance.aggregate.requests.total == 40  # 20 per window, 2 pairs
        assert base.scenario.stack[0].standardized.tool_version == s.versions["baseline"]


def test_an_open_loop_level_is_a_request_rate(tmp_path):
    from tests.reporting.test_report_decision import window

    s = compare([window(2.5, 0, open_loop=True), window(2.5, 1, open_loop=True)],
                [window(2.5, 0, open_loop=True, tok_s=90.0), window(2.5, 1, open_loop=True, tok_s=90.0)])
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "compare.json").write_text(s.model_dump_json())
    profile = LoadProfile(name="p", rates=[2.5], input_tokens={"uniform": [24, 40]}, output_tokens=8)
    (run_dir / "run.json").write_text(json.dumps({"profile": profile.model_dump(mode="json")}))
    export_benchmark_reports(run_dir, tmp_path / "out")
    load = read(tmp_path / "out" / "benchmark-report-stack_0.yaml").scenario.load.standardized
    assert (load.rate_qps, load.concurrency) == (2.5, None)
    assert (load.input_seq_len.distribution, load.input_seq_len.value, load.input_seq_len.min,
            load.input_seq_len.max) == ("uniform", 32, 24, 40)
