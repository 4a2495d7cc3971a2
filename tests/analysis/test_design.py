"""The pieces of a compare's design that need no deployment: the counterbalanced schedule, the steady part of a
window, the GPU-like calibration's choices, the verdict's edge cases, and the endpoints a stack declares have no
/metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.calibrate import MAX_S, MAX_WAVES, levels_held, more_waves
from harness.analysis.conclude import pair_order
from harness.analysis.stats import steady_window, tokens_between
from harness.analysis.verdict import Criteria, balanced_mean, components, holm, judge
from harness.host.dtype import fastest_dtype
from harness.load.client import RequestRecord
from harness.measure.pairs import schedule
from harness.profile.engine import EmulatedStep
from harness.schemas import Components, DtypeChoice
from stacks.base import DeploySettings
from stacks.sim import SimStack


def test_pairs_run_ab_ba_ba_ab_and_again_each_a_fresh_deployment(tmp_path):
    assert pair_order(6) == [1, -1, -1, 1, 1, -1]
    plan = schedule(SimStack(DeploySettings(log_dir=tmp_path)), 3)
    assert [(label, k) for label, k, _ in plan] == [("baseline", 0), ("stack", 0), ("stack", 1), ("baseline", 1),
                                                      ("stack", 2), ("baseline", 2)]
    assert len({id(t) for _, _, t in plan}) == 6  # nothing deployed twice
    assert plan[0][2].settings.log_dir == tmp_path / "pair1" / "baseline"


def test_the_order_balanced_mean_cancels_a_linear_drift():
    order = np.array([1, -1, -1])  # 3 pairs: one AB, two BA
    drift = 0.05 * order[:, None] * np.ones((3, 2))  # the later side of each pair is 5% slower
    est, factor = balanced_mean(drift, order)
    assert est == pytest.approx([0.0, 0.0]) and factor == pytest.approx((1 + 1 / 2) / 4)
    assert drift.mean(axis=0) == pytest.approx([-0.05 / 3, -0.05 / 3])  # the plain mean keeps a third of it


def test_holm_and_a_verdict_without_any_spread():
    """Pairs that all differ by exactly the same give no certainty: the variance is floored at the window's
    resolution where the endpoint has one (goodput: one request of 30), and else the level has no interval."""
    assert holm([0.01, 0.04, None, 0.03]) == [0.03, 0.06, None, 0.06]
    shares = Criteria(log_scale=False)
    order = np.array([1, -1, -1])
    same = np.full((3, 2), -0.5)  # goodput 100% -> 50% in every pair
    bare = judge(same, order, criteria=shares)
    assert [v.verdict for v in bare] == ["inconclusive"] * 2 and all(v.p is None and v.lo is None for v in bare)
    assert "no variance to judge by" in bare[0].note
    floored = judge(same, order, criteria=shares, resolution=[1 / 30] * 2)
    assert [v.verdict for v in floored] == ["overhead"] * 2 and all(v.p > 0 for v in floored)
    assert floored[0].se == pytest.approx(math.sqrt((1 / 30) ** 2 / 6 * (1 + 1 / 2) / 4))
    assert "resolution" in floored[0].note
    none = np.zeros((3, 2))  # 100% against 100%: equivalent only as far as 30 requests a window can tell
    assert [v.verdict for v in judge(none, order, criteria=shares, resolution=[1 / 30] * 2)] == ["equivalent"] * 2
    assert [v.verdict for v in judge(none, order, criteria=shares, resolution=[1 / 4] * 2)] == ["inconclusive"] * 2
    assert [v.verdict for v in judge(none, order, criteria=shares)] == ["inconclusive"] * 2


def test_each_level_has_its_own_noise():
    """Goodput at 100% on both sides at two levels and varying at the third: the third's interval is its own
    pairs' (t on 1 degree of freedom for 2 pairs), not a residual pooled with the two silent levels."""
    d = np.array([[0.0, 0.0, 0.048], [0.0, 0.0, 0.037]])  # 20261204-224224's c=16 goodput, from its components
    v = judge(d, np.array([1, -1]), criteria=Criteria(log_scale=False), resolution=[1 / 30] * 3)[2]
    assert v.df == 1 and v.se == pytest.approx(abs(0.048 - 0.037) / 2)
    assert 0.05 < v.p < 0.15 and v.verdict == "inconclusive"
    pooled_se = math.sqrt(components(d).variance / 2)
    assert v.se > 1.5 * pooled_se  # the pooled residual was far too narrow


def test_host_components_pool_across_level_counts():
    rng = np.random.default_rng(0)
    a = components(rng.normal(0, 0.1, (4, 3)) + rng.normal(0, 0.1, (4, 1)))
    b = Components(ms_pair=a.ms_pair, df_pair=a.df_pair, ms_res=a.ms_res, df_res=a.df_res, levels=a.levels,
                   pairs=a.pairs)
    pooled = a.pooled(b)
    assert pooled.variance == pytest.approx(a.variance) and pooled.df_pair == 2 * a.df_pair
    other = Components(ms_pair=7 * a.sigma_u2 + a.ms_res, df_pair=3, ms_res=a.ms_res, df_res=18, levels=7, pairs=4)
    assert a.pooled(other).sigma_u2 == pytest.approx(a.sigma_u2)  # the same noise measured over 7 levels


def rec(i: int, start_ms: float, ttft_ms: float, c: int, n: int = 10, gap_ms: float = 10.0) -> RequestRecord:
    events = [ttft_ms + k * gap_ms for k in range(n)]
    return RequestRecord(index=i, level=c, t_start_ns=int(start_ms * 1e6), t_end_ns=int((start_ms + events[-1]) * 1e6),
                         ok=True, ttft_ms=ttft_ms, e2e_ms=events[-1], event_ms=events, output_tokens=n)


def test_the_steady_part_opens_once_every_slot_decodes_and_closes_at_the_last_start():
    # c=2: the first wave's TTFTs are 50 and 90 ms (queued prefills); then each slot restarts every 150 ms
    records = [rec(0, 0, 50, 2), rec(1, 0, 90, 2)] + [rec(2 + i, 150 * (1 + i // 2), 20, 2) for i in range(8)]
    opened, closed = steady_window(records, 2)
    assert (opened, closed) == (int(90e6), int(600e6))
    rate = tokens_between(records, opened, closed) / ((closed - opened) / 1e9)
    assert 100 < rate < 200  # two slots at one token per 10 ms at most
    short = [rec(0, 0, 50, 2), rec(1, 0, 140, 2), rec(2, 150, 20, 2)]  # 10 ms of a 150 ms full-load period
    assert steady_window(short, 2) is None


def test_the_calibration_keeps_the_levels_up_to_the_highest_one_held():
    step = EmulatedStep(base_ms=10.0, decode_ms_per_token=0.1, prefill_ms_per_token=0.0)

    def wave(c: int, gap: float) -> list[RequestRecord]:
        return [rec(i, 0, 30, c, gap_ms=gap) for i in range(c)]

    cal = levels_held(step, {1: wave(1, 10.2), 16: wave(16, 11.9), 64: wave(64, 19.0)})
    assert cal.kept == [1, 16] and list(cal.left_out) == [64]
    assert "19.0 ms against 16.4 ms configured" in cal.left_out[64]
    nothing = levels_held(step, {1: wave(1, 30.0)})
    assert nothing.kept == [] and "no level held" in nothing.left_out[1]


def test_a_level_is_calibrated_on_enough_gaps_to_fall_on_one_side_of_the_tolerance():
    """One request at c=1 is 9 gaps here: never enough. Then the level stops sampling once its estimate's
    interval is clear of the bound (10 ms x 1.1), and goes on while the interval holds it, to its cap."""
    step = EmulatedStep(base_ms=10.0, decode_ms_per_token=0.0, prefill_ms_per_token=0.0)
    rng = np.random.default_rng(7)

    def wave(n: int, gap: float, sd: float) -> list[RequestRecord]:
        return [rec(i, 0, 30, 1, gap_ms=float(g)) for i, g in enumerate(rng.normal(gap, sd, n))]

    assert more_waves(step, 1, wave(1, 10.0, 0.0), 1, 0.1)
    assert not more_waves(step, 1, wave(40, 10.0, 0.5), 40 - 1, 4.0)  # 10.0 +- 0.16 against 11.0
    near = wave(40, 11.0, 0.5)  # the bound inside its interval: one more wave
    assert more_waves(step, 1, near, 39, 4.0)
    assert not more_waves(step, 1, near, MAX_WAVES, 4.0) and not more_waves(step, 1, near, 39, MAX_S)
    assert levels_held(step, {1: near}).checks[0].requests == 40


def test_bfloat16_is_kept_only_where_the_cpu_computes_it(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho bfloat16 2.5\necho float32 2.9\n")
    fake.chmod(0o755)
    assert fastest_dtype(fake, {"avx512_bf16"}).dtype == "bfloat16"
    assert fastest_dtype(fake, {"avx2"}).dtype == "float32"  # no bfloat16 instructions: vLLM's kernels crawl
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\necho bfloat16 9.0\necho float32 2.9\n")
    slow.chmod(0o755)
    choice = fastest_dtype(slow, {"amx_bf16"})
    assert isinstance(choice, DtypeChoice) and choice.dtype == "float32" and "bfloat16 9.00 ms" in choice.text()
    assert fastest_dtype(tmp_path / "missing", {"amx_bf16"}).dtype == "float32"


def test_the_gpu_like_calibration_deploys_the_dtype_this_host_chose(monkeypatch):
    # the profile says `dtype: fastest`, which vLLM refuses: the calibration section once passed it on as it was
    from harness.bench import gpulike
    from harness.host import dtype

    chosen = DtypeChoice(dtype="float32", step_ms={"float32": 2.9}, cpu_bf16=False)
    monkeypatch.setattr(dtype, "fastest_dtype", lambda python: chosen)
    gpu_like, tiny = gpulike.engines()
    assert gpu_like.dtype == tiny.dtype == "float32" and gpu_like.dtype_measured
    assert gpu_like.model == "gpu-like" and tiny.model == "tiny" and tiny.step is None


def test_endpoints_declared_without_metrics_are_listed_and_never_scraped(tmp_path):
    from harness.analysis.audit import METRICLESS, audit_from_scrapes
    from stacks.ray import RayStack
    from stacks.triton import TritonStack

    for cls in (RayStack, TritonStack):
        stack = cls(DeploySettings(log_dir=tmp_path))
        assert "api" in stack.metricless_endpoints() and "api" not in stack.metric_endpoints()
    a = audit_from_scrapes([], {}, "ray", metricless={"api": "http://127.0.0.1:1/metrics"})
    (ep,) = a.endpoints
    assert ep.status == METRICLESS and ep.gaps == 0 and ep.ok_scrapes == 0
