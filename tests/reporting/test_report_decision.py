"""The compare report's headline (harness/reporting/report.py decision), its capacity figures
(harness/reporting/report_tables.py,
harness/procedures/capacity.py of_levels), the terminal's short summary (harness/reporting/terminal.py) and the TTFT
samples a
report reads back (harness/analysis/samples.py), from small hand-built summaries whose figures are chosen so that each
sentence can be checked exactly."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from harness.analysis.capacity import of_levels
from harness.analysis.deltas import level_deltas
from harness.analysis.samples import ttft_samples
from harness.profile.schema import SLO
from harness.reporting.report import decision
from harness.reporting.report_tables import capacities, capacity_table, capacity_text, slo_text
from harness.reporting.terminal import compare_summary
from harness.schemas import (
    SLA,
    AppliedConfig,
    CapacityResult,
    ClientHealth,
    CompareSummary,
    Dist,
    LevelStats,
    LevelSummary,
    RunSummary,
    ServerLevelMetrics,
)
from tests.reporting.test_plots import line

HEALTH = ClientHealth(cpu_pct=20.0, loop_lag_ms=Dist(), dispatch_delay_ms=Dist())
NO_ENGINE = (None, None, None)


def window(level: float, repeat: int = 0, *, tok_s: float = 100.0, ttft_p95: float = 200.0, itl_p95: float = 10.0,
           ttft_mean: float = 100.0, e2e_mean: float = 500.0, goodput: float = 1.0, ok: int = 40,
           engine: tuple[float | None, float | None, float | None] = NO_ENGINE, incomplete: str | None = None,
           open_loop: bool = False) -> LevelSummary:
    """One measured window (a repeat of a level) with the figures the report quotes; engine: the engine's own
    (mean TTFT ms, mean E2E ms, requests counted) over the window."""
    stats = LevelStats(concurrency=0 if open_loop else int(level), rate=float(level) if open_loop else None,
                       repeat=repeat, sent=ok, succeeded=ok, failed=0, errors={}, wall_s=10.0,
                       output_tokens=int(tok_s * 10), throughput_tok_s=tok_s, request_rate=ok / 10, goodput=goodput,
                       good_rps=goodput * ok / 10, ttft_ms=Dist(n=ok, mean=ttft_mean, p50=ttft_mean, p95=ttft_p95),
                       itl_ms=Dist(n=ok, p95=itl_p95), tpot_ms=Dist(), e2e_ms=Dist(n=ok, mean=e2e_mean),
                       tokens_per_chunk=1.0, dispatch_delay_ms=Dist())
    server = ServerLevelMetrics(engine_ttft_ms=engine[0], engine_e2e_ms=engine[1], engine_requests=engine[2])
    return LevelSummary(stats=stats, client=HEALTH, process_cpu_s={"engine": 5.0}, window_s=10.0, server=server,
                        incomplete=incomplete, pair=repeat)  # each window its own deployment pair


def pair(level: float, tok_s: float, ttft_p95: float = 200.0, n: int = 2, spread: float = 0.01,
         ttft_spread: float = 0.05, **kw) -> list[LevelSummary]:
    """n deployment pairs' windows (2 or 3), `spread` either side of tok_s and `ttft_spread` either side of ttft_p95
    (compare() gives the stack's to other pairs, so the pairs' differences spread): enough for an interval over the
    pairs. An effect the compare's one error budget can call needs 3: two pairs leave a level 1 degree of freedom
    (t = 12.7 at 5%, and far more at a hypothesis' share of it)."""
    f = (1 - spread, 1 + spread, 1.0)
    g = (1 - ttft_spread, 1 + ttft_spread, 1.0)
    return [window(level, r, tok_s=tok_s * f[r], ttft_p95=ttft_p95 * g[r], **kw) for r in range(n)]


# three pairs whose throughput and TTFT spread wide: a goodput collapse there is called, and the other two are not
WIDE = {"n": 3, "spread": 0.3, "ttft_spread": 0.4}


def run(label: str, stack: str, windows: list[LevelSummary], status: str = "complete") -> RunSummary:
    r = RunSummary(run_id="t", label=label, stack=stack, engine_version="0.32.0", applied=AppliedConfig(),
                   profile="p", status=status)
    for lv in windows:
        r.add(lv)
    return r


def compare(base: list[LevelSummary], stack: list[LevelSummary], *, name: str = "ray", baseline_stack: str = "vllm",
            slo: SLO | None = None, status: str = "complete", stack_status: str = "complete") -> CompareSummary:
    for lv in stack:  # the stack's first window in the baseline's second pair, ...: the pairs' differences spread
        n = len({w.stats.repeat for w in stack if w.stats.level == lv.stats.level})
        if lv.stats.rate is None and n in (2, 3):
            lv.pair = (lv.stats.repeat + 1) % n
    runs = {"baseline": run("baseline", baseline_stack, base), "stack": run("stack", name, stack, stack_status)}
    levels = sorted({lv.stats.level for lv in base + stack})
    open_loop = any(lv.stats.rate is not None for lv in base + stack)
    return CompareSummary(run_id="t", stack=name, baseline_stack=baseline_stack, in_request_path=True, profile="p",
                          repeats=2, versions={"baseline": "0.32.0", "stack": "0.32.0"}, version_match=True,
                          applied={}, settings_match=True, settings_mismatches=[], options={}, status=status,
                          runs=runs, levels=level_deltas(runs["baseline"], runs["stack"], levels, open_loop), slo=slo)


def starting(lines: list[str], prefix: str) -> list[str]:
    return [x for x in lines if x.startswith(prefix)]


# --- capacity -------------------------------------------------------------------------------------------------

SLA_T = SLA(ttft_p95_s=0.5)


def result(kind: str = "concurrency", value: float = 4, reached: bool = True) -> CapacityResult:
    if kind == "concurrency":
        return CapacityResult(label="stack", stack="ray", kind="concurrency", sla=SLA_T, max_concurrency=int(value),
                              reached=reached)
    return CapacityResult(label="stack", stack="ray", kind="rate", sla=SLA_T, max_rate=value, reached=reached)


def test_capacity_text_closed_loop():
    assert capacity_text(result(value=0)) == "0 (no measured level held)"
    assert capacity_text(result(value=0), "failed") == "0 (no measured level held)"
    assert capacity_text(result(value=4)) == "c=4"
    assert capacity_text(result(value=4), "failed") == "c=4"  # a level broke: the capacity is known
    assert capacity_text(result(value=8, reached=False)) == "≥ c=8 (every level held)"
    assert capacity_text(result(value=8, reached=False), "complete") == "≥ c=8 (every level held)"


@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_capacity_of_a_run_that_stopped_early_does_not_claim_every_level_held(status):
    for r, lead in ((result(value=8, reached=False), "≥ c=8"), (result("rate", 2.5, reached=False), "≥ 2.5 req/s")):
        text = capacity_text(r, status)
        assert text.startswith(lead + " ")
        assert "every level held" not in text
        assert status in text


def test_capacity_text_open_loop_is_in_requests_per_second():
    assert capacity_text(result("rate", 0.0)) == "0 (no measured level held)"
    assert capacity_text(result("rate", 2.5)) == "2.5 req/s"
    assert capacity_text(result("rate", 8.0, reached=False)) == "≥ 8 req/s (every level held)"
    assert "c=" not in capacity_text(result("rate", 8.0, reached=False), "failed")


def test_slo_text_names_the_itl_bound_only_when_set():
    s = compare(pair(1, 100), pair(1, 100), slo=SLO(ttft_s=0.5))
    assert slo_text(s) == "TTFT p95 ≤ 500 ms"
    s.slo = SLO(ttft_s=0.25, itl_p95_s=0.05)
    assert slo_text(s) == "TTFT p95 ≤ 250 ms and ITL p95 ≤ 50 ms"
    s.slo = None
    assert slo_text(s) == ""


def test_a_level_holds_only_if_every_repeat_held():
    # c=4: the first repeat holds, the second breaks TTFT p95 ≤ 500 ms
    r = run("stack", "ray", [window(1, 0), window(1, 1), window(4, 0, ttft_p95=400.0),
                             window(4, 1, ttft_p95=900.0)])
    cap = of_levels("stack", "ray", r, SLA_T)
    assert cap is not None and cap.max_concurrency == 1 and cap.reached and cap.broke_at == 4.0
    assert [p.level for p in cap.probes if not p.held] == [4.0]
    assert "TTFT p95 900 ms > 500 ms" in next(p for p in cap.probes if p.level == 4.0).why
    # both repeats within the bound: the level holds
    ok = run("stack", "ray", [window(1, 0), window(4, 0, ttft_p95=400.0), window(4, 1, ttft_p95=450.0)])
    cap = of_levels("stack", "ray", ok, SLA_T)
    assert cap is not None and cap.max_concurrency == 4 and not cap.reached


def test_of_levels_ignores_levels_stopped_early():
    r = run("stack", "ray", [window(1), window(4), window(8, ttft_p95=5000.0, incomplete="died")])
    cap = of_levels("stack", "ray", r, SLA_T)
    assert cap is not None and cap.max_concurrency == 4 and not cap.reached and cap.broke_at is None
    assert sorted(p.level for p in cap.probes) == [1.0, 4.0]
    only_stopped = run("stack", "ray", [window(1, incomplete="died"), window(4, incomplete="died")])
    assert of_levels("stack", "ray", only_stopped, SLA_T) is None
    assert of_levels("stack", "ray", run("stack", "ray", []), SLA_T) is None


def test_of_levels_in_an_open_loop_is_a_rate():
    r = run("stack", "ray", [window(2.0, open_loop=True), window(8.0, ttft_p95=900.0, open_loop=True)])
    cap = of_levels("stack", "ray", r, SLA_T)
    assert cap is not None and cap.kind == "rate" and cap.max_rate == 2.0 and cap.broke_at == 8.0
    assert capacity_text(cap) == "2 req/s"


def test_capacities_per_side_at_the_slo():
    # the stack breaks TTFT p95 at c=4; the baseline holds at every level
    s = compare(pair(1, 100) + pair(4, 400), pair(1, 90) + pair(4, 300, ttft_p95=800.0), slo=SLO(ttft_s=0.5))
    caps = capacities(s)
    assert set(caps) == {"baseline", "stack"}
    assert caps["stack"].max_concurrency == 1 and caps["stack"].reached and caps["stack"].broke_at == 4.0
    assert caps["baseline"].max_concurrency == 4 and not caps["baseline"].reached
    table = capacity_table(s)
    assert len(table) == 1
    title, caption, header, rows = table[0]
    assert title == "Capacity at the SLO" and "TTFT p95 ≤ 500 ms" in caption and "ITL" not in caption
    assert header[:3] == ["deployment", "capacity", "broke at"]
    by_side = {row[0]: row for row in rows}
    assert by_side["ray"][1:4] == ["c=1", "c=4", "TTFT p95 760 ms > 500 ms"]  # its first window that broke
    assert by_side["vllm"][1:3] == ["≥ c=4 (every level held)", "—"]


def test_capacity_table_names_an_itl_bound_and_a_side_that_stopped_early():
    s = compare(pair(1, 100) + pair(4, 400), pair(1, 90, itl_p95=70.0), slo=SLO(ttft_s=0.5, itl_p95_s=0.05),
                stack_status="failed")
    caps = capacities(s)
    assert caps["stack"].max_concurrency == 0  # ITL p95 70 ms > 50 ms at the only level it measured
    (_, caption, _, rows), = capacity_table(s)
    assert "TTFT p95 ≤ 500 ms and ITL p95 ≤ 50 ms" in caption
    by_side = {row[0]: row for row in rows}
    assert by_side["ray"][1] == "0 (no measured level held)" and "ITL p95 70 ms > 50 ms" in by_side["ray"][3]
    # the baseline held everywhere, the stack failed: only the stack's side is flagged as stopped
    assert by_side["vllm"][1] == "≥ c=4 (every level held)"
    held = compare(pair(1, 100), pair(1, 90), slo=SLO(ttft_s=0.5), stack_status="interrupted")
    text = {row[0]: row[1] for row in capacity_table(held)[0][3]}["ray"]
    assert text.startswith("≥ c=1") and "every level held" not in text and "interrupted" in text


def test_no_slo_no_capacity():
    s = compare(pair(1, 100), pair(1, 90), slo=None)
    assert capacities(s) == {}
    assert capacity_table(s) == []
    assert not any("capacity" in x for x in decision(s))


def test_a_level_that_broke_below_one_that_held_is_not_every_level_held():
    """On a noisy host c=4 can break while c=8 holds (judge warns of the inversion); the capacity line must not
    then claim that every level held."""
    s = compare(pair(1, 100) + pair(4, 400) + pair(8, 800),
                pair(1, 90) + pair(4, 300, ttft_p95=800.0) + pair(8, 600), slo=SLO(ttft_s=0.5))
    cap = capacities(s)["stack"]
    assert any(not p.held for p in cap.probes)
    assert "every level held" not in capacity_text(cap, s.runs["stack"].status)
    # a compare's capacity is the level below its first break, and the inversion is said in the table
    assert (cap.value, cap.reached, cap.broke_at) == (1, True, 4) and capacity_text(cap) == "c=1"
    assert any("c=8 held although c=4 broke" in w for w in cap.warnings)
    (_, caption, _, _), = capacity_table(s)
    assert "c=8 held although c=4 broke" in caption


# --- the headline ---------------------------------------------------------------------------------------------

def test_headline_names_the_worst_significant_endpoint_at_its_level():
    # c=1 alike, c=4: goodput 100% -> 50% in all three pairs (and throughput and TTFT worse, but inside the pairs'
    # spread), c=8 measured by the baseline only (the stack died)
    s = compare(pair(1, 100, ttft_p95=100.0) + pair(4, 400, ttft_p95=200.0, **WIDE) + pair(8, 800),
                pair(1, 100, ttft_p95=110.0) + pair(4, 320, ttft_p95=300.0, goodput=0.5, **WIDE))
    assert [lv.verdict for lv in s.levels] == ["inconclusive", "overhead", "missing"]
    c4 = s.levels[1]
    assert c4.why == "goodput" and c4.endpoints["throughput"].verdict == "inconclusive"
    assert c4.delta_pct == pytest.approx(-20.0) and c4.ci is not None and c4.ci.lo_pct < -20 < c4.ci.hi_pct
    lines = decision(s)
    assert lines[0].startswith("**ray at c=4 against bare vLLM 0.32.0: overhead: goodput 100% → 50%; throughput "
                               "inconclusive (could have detected ")
    assert "TTFT p95 inconclusive" in lines[0] and lines[0].endswith("TTFT p95 200 → 300 ms)")
    assert starting(lines, "by level") == ["by level (one error budget: Holm's correction over the 2 judged "
                                           "levels × 3 endpoints; 3 deployment pairs): overhead at c=[4] "
                                           "(goodput); inconclusive at c=[1]; missing at c=[8]"]


def test_headline_names_the_shape_and_a_gain():
    s = compare(pair(1, 100), [window(1, 0, tok_s=120 * 1.02, ttft_p95=190), window(1, 1, tok_s=120 * 0.99,
                                                                                   ttft_p95=210)])
    s.shape = "raw mode"
    head = decision(s)[0]
    assert head.startswith("**ray (raw mode) at c=1 against bare vLLM 0.32.0: gain: throughput +20.6%")
    assert starting(decision(s), "by level") == ["by level (one error budget: Holm's correction over the 1 "
                                                 "judged level × 3 endpoints; 2 deployment pairs): gain at c=[1] "
                                                 "(throughput)"]


def test_one_pair_and_no_aa_has_no_interval_and_says_so():
    s = compare([window(1, tok_s=100), window(4, tok_s=400)], [window(1, tok_s=90), window(4, tok_s=300)])
    assert [lv.verdict for lv in s.levels] == ["inconclusive", "inconclusive"]
    assert all(lv.ci is None for lv in s.levels)
    lines = decision(s)
    assert lines[0].startswith("**ray at c=4 against bare vLLM 0.32.0: inconclusive: throughput inconclusive (no "
                               "interval: fewer than 2 deployment pairs and no A/A of this profile on this host)")
    assert "95% interval" not in lines[0]


def test_the_hosts_aa_floors_a_quiet_compare_and_gives_one_pair_an_interval():
    from harness.analysis.deltas import judged_levels
    from harness.analysis.judging import Design
    from harness.schemas import AAReference, Components

    base = [window(1, tok_s=100), window(4, tok_s=400)]
    stack = [window(1, tok_s=90), window(4, tok_s=300)]
    runs = (run("baseline", "vllm", base), run("stack", "ray", stack))
    noisy = Components(ms_pair=0.005, df_pair=4, ms_res=0.0025, df_res=8, levels=2, pairs=5)  # an A/A: ~6% a pair
    levels, _ = judged_levels(*runs, [1, 4], design=Design(host={"throughput": noisy}))
    assert all(lv.ci is not None for lv in levels)
    assert levels[1].endpoints["throughput"].verdict == "overhead"  # -25% against a host's ±6% per pair
    assert levels[0].endpoints["throughput"].verdict == "inconclusive"  # -10%: inside it
    assert AAReference(run_id="aa", levels={}, components={"throughput": noisy}).components["throughput"].pairs == 5


def test_nothing_measured_on_both_sides():
    s = compare(pair(1, 100) + pair(4, 400), [], status="failed", stack_status="failed")
    assert s.top is None
    lines = decision(s)
    assert lines[0] == "**ray: no level measured on both sides** (status failed)"
    assert starting(lines, "over the") == []


def test_capacity_line_names_both_sides_and_the_itl_bound():
    base = pair(1, 100) + pair(4, 400)
    stack = pair(1, 90) + pair(4, 300, ttft_p95=800.0)
    with_itl = starting(decision(compare(base, stack, slo=SLO(ttft_s=0.5, itl_p95_s=0.05))), "capacity")
    assert with_itl == ["capacity at TTFT p95 ≤ 500 ms and ITL p95 ≤ 50 ms among the measured levels: ray c=1; "
                        "vllm ≥ c=4 (every level held)"]
    ttft_only = starting(decision(compare(base, stack, slo=SLO(ttft_s=0.5))), "capacity")
    assert ttft_only == ["capacity at TTFT p95 ≤ 500 ms among the measured levels: ray c=1; vllm ≥ c=4 (every level "
                         "held)"]


def test_capacity_line_of_a_stack_that_stopped_early():
    s = compare(pair(1, 100) + pair(4, 400), pair(1, 90), slo=SLO(ttft_s=0.5), stack_status="failed")
    (cap_line,) = starting(decision(s), "capacity")
    stack_part = cap_line.split(": ", 1)[1].split("; vllm")[0]
    assert stack_part.startswith("ray ≥ c=1") and "every level held" not in stack_part and "failed" in stack_part


# --- where the latency went -----------------------------------------------------------------------------------

BASE_ENGINE = (60.0, 450.0, 40.0)  # the baseline's client: TTFT 100 ms, E2E 500 ms


def where(lines: list[str]) -> list[str]:
    return starting(lines, "where the latency went")


def test_where_the_latency_went_when_both_sides_expose_the_engine():
    s = compare(pair(4, 400, engine=BASE_ENGINE),
                pair(4, 380, ttft_mean=180.0, e2e_mean=600.0, engine=(62.0, 455.0, 40.0)))
    # outside: stack 180 − 62 = 118, baseline 100 − 60 = 40 -> +78; E2E (600 − 455) − (500 − 450) = +95
    assert where(decision(s)) == [
        "where the latency went at c=4: ray adds +78 ms to TTFT and +95 ms to E2E outside the engine (client − "
        "engine: 118 ms behind ray vs 40 ms for the bare API server)"]


def test_where_the_latency_went_quotes_the_highest_level_and_flags_lagging_repeats():
    # c=4: one of the stack's two windows counted 80 requests for the client's 40 (left out of both means)
    stack = (pair(1, 100, ttft_mean=150.0, engine=(60.0, 450.0, 40.0))
             + [window(4, 0, tok_s=396, ttft_mean=180.0, e2e_mean=600.0, engine=(62.0, 455.0, 40.0)),
                window(4, 1, tok_s=404, ttft_mean=900.0, e2e_mean=2000.0, engine=(500.0, 1900.0, 80.0))])
    s = compare(pair(1, 100, engine=BASE_ENGINE) + pair(4, 400, engine=BASE_ENGINE), stack)
    (line_,) = where(decision(s))
    assert line_.startswith("where the latency went at c=4: ray adds +78 ms to TTFT and +95 ms to E2E")
    assert line_.endswith("; from the repeats whose engine histograms counted the client's requests (the others "
                          "lagged)")


def test_a_stack_that_hides_the_engines_histograms():
    s = compare(pair(4, 400, engine=BASE_ENGINE), pair(4, 380, ttft_mean=180.0))
    assert where(decision(s)) == [
        "where the latency went: ray hides the engine's TTFT and E2E histograms, so the time it adds outside the "
        "engine cannot be told apart from the engine's"]


def test_a_stack_whose_engine_histograms_lag_in_every_window():
    s = compare(pair(4, 400, engine=BASE_ENGINE), pair(4, 380, ttft_mean=180.0, engine=(500.0, 1900.0, 91.0)))
    (line_,) = where(decision(s))
    assert "counted other requests" in line_ and "hides" not in line_
    assert line_ == ("where the latency went: the engine's histograms behind ray counted other requests than the "
                     "client in every window (their exporter lags), so the time outside the engine cannot be measured")


def test_an_aa_compare_has_no_layer_to_split():
    s = compare(pair(4, 400, engine=BASE_ENGINE), pair(4, 400, ttft_mean=120.0, engine=(62.0, 455.0, 40.0)),
                name="vllm")
    assert s.stack == s.baseline_stack
    assert where(decision(s)) == []
    # the same figures behind a layer do give the line
    layer = compare(pair(4, 400, engine=BASE_ENGINE), pair(4, 400, ttft_mean=120.0, engine=(62.0, 455.0, 40.0)))
    assert len(where(decision(layer))) == 1


# --- the terminal ---------------------------------------------------------------------------------------------

def flat(text: str) -> str:
    """A rich export as one line: panel borders dropped and whitespace (wrapping) collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", text))


def test_terminal_summary_prints_headline_delta_table_and_report_path(tmp_path):
    s = compare(pair(1, 100) + pair(4, 400, **WIDE), pair(1, 100) + pair(4, 320, ttft_p95=300.0, goodput=0.5, **WIDE),
                slo=SLO(ttft_s=0.5))
    console = Console(record=True, width=200, file=io.StringIO())
    report = tmp_path / "reports" / "t" / "report.md"
    compare_summary(console, s, report, tmp_path / "results" / "t", "complete")
    text = console.export_text()
    plain = flat(text)
    assert "ray vs vllm — t" in plain  # the panel's title
    assert "ray at c=4 against bare vLLM 0.32.0: overhead: goodput 100% → 50%" in plain
    assert "**" not in text  # Markdown bold is rendered, not printed
    assert "overhead at c=[4] (goodput); inconclusive at c=[1]" in plain
    assert "verdicts by level (" in text
    rows = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip().startswith(("c=1 ", "c=4 "))}
    assert set(rows) == {"c=1", "c=4"}
    assert "inconclusive" in rows["c=1"] and "+0.0%" in rows["c=1"]
    assert "overhead (goodput)" in rows["c=4"] and "-20.0%" in rows["c=4"] and s.levels[1].ci.text() in rows["c=4"]
    assert "200 / 300" in rows["c=4"] and "100% / 50%" in rows["c=4"]
    assert f"report: {report} (+ report.html: one file, plots inline); results: {tmp_path / 'results' / 't'} " \
           "(status: complete)" in plain


def test_terminal_summary_prints_the_warnings(tmp_path):
    s = compare(pair(1, 100), [], status="failed", stack_status="failed")
    s.failures = {"stack": "the deployment died\ntraceback"}
    console = Console(record=True, width=200, file=io.StringIO())
    compare_summary(console, s, tmp_path / "report.md", tmp_path, "failed")
    plain = flat(console.export_text())
    assert "ray: no level measured on both sides (status failed)" in plain
    assert "⚠ stack failed: the deployment died (what was measured before is kept)" in plain
    assert "traceback" not in plain
    assert "missing" in plain and "(status: failed)" in plain


# --- TTFT samples ---------------------------------------------------------------------------------------------

def test_ttft_samples_keep_only_the_repeats_that_count(tmp_path: Path):
    lines = [
        line("baseline", ttft_ms=11.0, level=4, repeat=0),
        line("baseline", ttft_ms=12.0, level=4, repeat=1),  # stopped early: not in keep
        line("stack", ttft_ms=21.0, level=4, repeat=0),
        line("stack", ttft_ms=22.0, level=4, repeat=0, index=1),
        line("stack", ttft_ms=31.0, level=8, repeat=0),  # a level keep does not name at all
        line("stack", ttft_ms=99.0, level=4, repeat=0, phase="warmup"),  # never measured
    ]
    (tmp_path / "requests.jsonl").write_text("\n".join(lines) + "\n")
    keep = {("baseline", 4, 0), ("stack", 4, 0)}
    assert ttft_samples(tmp_path, keep) == {"baseline": {4: [11.0]}, "stack": {4: [21.0, 22.0]}}
    everything = ttft_samples(tmp_path)
    assert everything == ttft_samples(tmp_path, None)
    assert {k: sorted(v) for k, v in everything["baseline"].items()} == {4: [11.0, 12.0]}
    assert {k: sorted(v) for k, v in everything["stack"].items()} == {4: [21.0, 22.0], 8: [31.0]}
    assert ttft_samples(tmp_path, set()) == {}


def test_ttft_samples_keep_matches_a_compares_measured_repeats(tmp_path: Path):
    """keep is CompareSummary.measured_repeats: its levels are LevelStats.level, a rate (float) in an open loop."""
    s = compare([window(2.0, 0, open_loop=True), window(2.0, 1, open_loop=True, incomplete="died")],
                [window(2.0, 0, open_loop=True)])
    keep = s.measured_repeats
    assert keep == {("baseline", 2.0, 0), ("stack", 2.0, 0)}
    ms = 1_000_000
    sched = {"t_due_ns": 1_000 * ms, "t_task_ns": 1_010 * ms, "t_start_ns": 1_010 * ms}  # sent 10 ms late
    lines = [line("baseline", ttft_ms=5.0, level=2.0, repeat=0, **sched),
             line("baseline", ttft_ms=6.0, level=2.0, repeat=1, **sched),
             line("stack", ttft_ms=7.0, level=2.0, repeat=0, **sched)]
    (tmp_path / "requests.jsonl").write_text("\n".join(lines) + "\n")
    got = ttft_samples(tmp_path, keep)
    assert got == {"baseline": {2.0: pytest.approx([15.0])}, "stack": {2.0: pytest.approx([17.0])}}
    assert len(ttft_samples(tmp_path)["baseline"][2.0]) == 2


def test_a_level_whose_endpoints_disagree_is_mixed_and_says_both():
    # three pairs at c=1: the stack a fifth slower in throughput and its TTFT p95 halved, both far past the spread
    s = compare(pair(1, 100, ttft_p95=200.0, n=3), pair(1, 80, ttft_p95=100.0, n=3))
    (lv,) = s.levels
    assert lv.endpoints["throughput"].verdict == "overhead" and lv.endpoints["ttft_p95"].verdict == "gain"
    assert (lv.verdict, lv.why) == ("mixed", "TTFT p95 gain, throughput overhead")
    head = decision(s)[0]
    assert head.startswith("**ray at c=1 against bare vLLM 0.32.0: mixed: throughput -20.0% overhead, TTFT p95 ×0.50 "
                           "(200 → 100 ms) gain"), head
    assert starting(decision(s), "by level")[0].endswith("mixed at c=[1] (TTFT p95 gain, throughput overhead)")
