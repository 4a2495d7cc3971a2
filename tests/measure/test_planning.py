"""A compare's plan from this host's noise (harness.measure.planning) and the inputs that drive it: MDE=, BUDGET=,
max_pairs, --anyway. Bad input is refused with one message and exit 2 before anything is deployed or written."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.conclude import pair_order
from harness.analysis.verdict import components
from harness.cli.main import main
from harness.measure.budget import Clock, SideTimes
from harness.measure.planning import Plan, detectable_share, make_plan, pairs_for, step_sweep_s, timings
from harness.profile.loading import load_profile
from harness.schemas import AAReference, CompareSummary, Stopping
from harness.schemas.compare import DeploymentTime


def noise(sd: float, sw: float, k: int = 4, levels: int = 3, seed: int = 0):
    """Components of an A/A of k pairs whose deployments vary by sd and windows by sw (log units)."""
    rng = np.random.default_rng(seed)
    dep, win = rng.normal(0, sd, (k, 2)), rng.normal(0, sw, (k, 2, levels))
    return components((dep[:, 1:2] + win[:, 1]) - (dep[:, 0:1] + win[:, 0]))


def test_more_pairs_detect_less_and_the_plan_finds_the_fewest_that_reach_the_target():
    comp = noise(0.02, 0.01)
    seen = [detectable_share(comp, k, 3) for k in range(2, 12)]
    assert all(b < a for a, b in zip(seen, seen[1:], strict=False))
    need = pairs_for(comp, 0.05, 3)
    assert need is not None and detectable_share(comp, need, 3) <= 0.05 < detectable_share(comp, need - 1, 3)
    assert pairs_for(noise(0.5, 0.5), 0.001, 3) is None  # beyond any budget


def clock(pair_s: float) -> Clock:
    """Both sides alike, a pair of pair_s seconds whether cold or warm."""
    side = SideTimes(cold_s=pair_s / 4, warm_s=pair_s / 4, judged_s=pair_s / 4 - 2, profiled_s=30.0, other_s=2.0)
    return Clock(prior={"baseline": side, "stack": side}, source="measured")


def plan(comp, budget_s: float | None, pair_s: float = 180.0, target: float = 0.03, most: int = 8) -> Plan:
    return Plan(target=target, levels=3, max_pairs=most, budget_s=budget_s, clock=clock(pair_s), noise=comp,
                noise_source="the noise of A/A x")


def test_the_plan_says_what_the_target_needs_and_what_the_budget_detects():
    comp = noise(0.01, 0.005)
    p = plan(comp, budget_s=15 * 60)
    need, lines = p.needed, p.lines()
    assert need is not None and f"you need about {need} pairs, about {need * 3} min" in lines[0]
    assert p.budget_pairs == 5 and "with the budget you set (15 min), 5 pairs" in lines[-1]
    assert f"{100 * detectable_share(comp, 5, 3):.1f}%" in lines[-1]


def test_a_target_the_budget_cannot_reach_is_refused_with_the_numbers():
    p = plan(noise(0.05, 0.03), budget_s=6 * 60, target=0.01)
    why = p.refusal()
    assert why is not None and "needs" in why and "2 fit the budget of 6 min" in why and "--anyway" in why


def test_a_budget_below_two_pairs_runs_the_minimum_anyway_and_one_below_a_warm_pair_is_refused():
    p = plan(None, budget_s=5 * 60)
    assert p.refusal() is None and p.budget_pairs == 2
    assert "the minimum, 2 pairs" in p.minimum_line() and "past your budget of 5 min: it runs anyway" \
        in p.minimum_line()
    why = plan(None, budget_s=2 * 60).refusal()
    assert why is not None and why.startswith("BUDGET 2 min is shorter than one warm deployment pair")


def test_the_gpu_like_step_estimates_a_sweep_and_a_stored_compare_replaces_the_estimate(tmp_path):
    quick = load_profile("quick")
    quick = quick.model_copy(update={"engine": quick.engine.on_host(False)})
    sweep = step_sweep_s(quick)
    # c=1: 30 requests + a warm-up wave + the compiled engine's warm-up sweep, 64 steps each at 9.56 ms; c=2:
    # 15+1+1 waves at 9.76 ms; c=16: 10+1+1 at 12.65 ms
    assert sweep == pytest.approx((32 * 64 * 9.556 + 17 * 64 * 9.762 + 12 * 64 * 12.646) / 1e3, rel=1e-3)
    est = timings(quick, "kserve", tmp_path)
    assert est is not None and est.source.startswith("estimated") and est.prior["stack"].judged_s == sweep
    run = tmp_path / "20260101-000000-compare-kserve-abcdef"
    run.mkdir()
    deps = [DeploymentTime(side=side, pair=k, start_s=start, judged_s=90.0, other_s=3.0)
            for side, k, start in (("baseline", 1, 60.0), ("stack", 1, 70.0), ("stack", 2, 40.0),
                                   ("baseline", 2, 30.0))]
    s = CompareSummary(run_id=run.name, stack="kserve", baseline_stack="vllm", in_request_path=True, profile="quick",
                       repeats=1, versions={}, version_match=True, applied={}, settings_match=True,
                       settings_mismatches=[], options={}, status="complete",
                       stopping=Stopping(max_pairs=8, target_mde=0.03, deployments=deps))
    (run / "compare.json").write_text(s.model_dump_json())
    got = timings(quick, "kserve", tmp_path)
    assert got is not None and got.source == f"measured by {run.name}"
    assert (got.prior["stack"].cold_s, got.prior["stack"].warm_s, got.prior["baseline"].warm_s) == (70.0, 40.0, 30.0)
    ray = timings(quick, "ray", tmp_path)  # another layer's times say nothing of Ray's; its bare vLLM's do
    assert ray is not None and ray.source.startswith(f"bare vLLM measured by {run.name}")
    assert ray.prior["baseline"].warm_s == 30.0 and ray.prior["stack"].cold_s > 90


def test_without_an_aa_the_plan_says_it_plans_from_the_first_pairs(tmp_path):
    p = make_plan(load_profile("quick"), "vllm", tmp_path, None)
    assert p.noise is None and "from the compare's own first two" in p.lines()[0] and p.refusal() is None


def test_a_stored_aa_is_the_plans_noise(tmp_path):
    comp = noise(0.003, 0.003)
    aa = AAReference(run_id="aa-run", levels={}, components={"throughput": comp}, pairs=4)
    p = make_plan(load_profile("quick"), "vllm", tmp_path, aa)
    assert p.noise == comp and "the A/A aa-run" in p.lines()[0]


@pytest.mark.parametrize("args, message", [
    (["--mde", "0%"], "MDE must be above 0% and below 100%"),
    (["--mde", "100%"], "MDE must be above 0% and below 100%"),
    (["--mde", "lots"], "MDE must be a percentage"),
    (["--budget", "0m"], "BUDGET must be longer than 0"),
    (["--budget", "soon"], "BUDGET must be a time"),
    (["--max-pairs", "0"], "max_pairs must be from 2 to 64"),
    (["--max-pairs", "1"], "MAX_PAIRS=1 contradicts the minimum design"),
    (["--pairs", "0"], "PAIRS must be at least 1"),
    (["--budget", "1m"], "BUDGET 1 min is shorter than one warm deployment pair"),
])
def test_bad_sequential_input_is_refused_before_anything_is_deployed(tmp_path, capsys, args, message):
    try:
        rc = main(["compare", "--stack", "vllm", "--results-dir", str(tmp_path / "r"), *args])
    except SystemExit as e:  # argparse's own refusal
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_a_profile_file_with_max_pairs_below_two_is_refused(write_profile, tmp_path, capsys):
    rc = main(["compare", "--stack", "vllm", "--profile", str(write_profile(max_pairs=1)), "--results-dir",
               str(tmp_path / "r")])
    assert rc == 2 and "max_pairs" in capsys.readouterr().err


def test_a_profile_that_names_its_pairs_keeps_a_fixed_design_and_the_default_is_sequential(write_profile):
    from harness.profile.loading import load_profile as load

    assert load(str(write_profile(pairs=3))).stopping == "fixed"
    assert load(str(write_profile())).stopping == "sequential" == load_profile("quick").stopping


def test_the_dry_run_prints_the_plan_and_an_unreachable_target_is_refused_unless_anyway(tmp_path, capsys,
                                                                                        monkeypatch):
    key = {"engine": "test", "model": "tiny", "replicas": "1", "devices": "none", "target": "local", "profile": "q"}
    monkeypatch.setattr("harness.procedures.compare.noise_key", lambda stack, profile, target="local": key)
    results = tmp_path / "r"
    aa_dir = results / "20260101-000000-compare-vllm-aaaaaa"
    aa_dir.mkdir(parents=True)
    comp = noise(0.003, 0.003)
    aa = CompareSummary(run_id=aa_dir.name, stack="vllm", baseline_stack="vllm", in_request_path=False,
                        profile="quick", repeats=1, versions={}, version_match=True, applied={}, settings_match=True,
                        settings_mismatches=[], options={}, status="complete", components={"throughput": comp},
                        order=pair_order(4), pairs=4, noise_key=key)
    (aa_dir / "compare.json").write_text(aa.model_dump_json())
    base = ["compare", "--stack", "triton", "--results-dir", str(results), "--dry-run"]
    assert main([*base, "--mde", "2%", "--budget", "20m"]) == 0
    out = capsys.readouterr().out
    assert "to detect 2% in throughput at every level you need about" in out and "with the budget you set (20 min)" \
        in out, out
    assert main([*base, "--mde", "0.01%", "--budget", "20m"]) == 2
    err = capsys.readouterr().err
    assert "a 0.01% detectable effect needs" in err and "--anyway" in err
    assert main([*base, "--mde", "0.01%", "--budget", "20m", "--anyway"]) == 0
    assert math.isfinite(detectable_share(comp, 4, 3))


def test_a_fixed_pairs_request_is_not_planned(tmp_path, capsys):
    assert main(["compare", "--stack", "vllm", "--pairs", "2", "--budget", "1m", "--results-dir",
                 str(tmp_path / "r"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "plan: " not in out.replace("; plan: ", "") and "you need about" not in out


def test_the_side_caches_of_a_compare_are_its_own(tmp_path):
    from stacks.base.engine_env import side_cache, side_start

    assert side_cache("run-a", "baseline") != side_cache("run-a", "stack") != side_cache("run-b", "stack")
    assert side_start(0).startswith("cold") and side_start(1).startswith("warm")
    assert isinstance(side_cache("x", "stack"), Path)
