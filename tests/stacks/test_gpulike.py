"""The GPU-like engine, everything but vLLM itself: the step's pacing (engine_plugin, plain Python), the profile
that selects it, the model directory both sides load, the environment that stops vLLM's queue readers spinning,
and the per-level check of the configured step against the engine's own histograms."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from harness.errors import LayerbenchError
from harness.profile.engine import EmulatedStep, EngineSettings
from harness.profile.loading import load_profile

PLUGIN = Path(__file__).resolve().parents[2] / "engine_plugin"
sys.path.insert(0, str(PLUGIN))
from layerbench_gpulike.pacing import Pacer, StepTime, split_lengths, split_positions  # noqa: E402

STEP = EmulatedStep(base_ms=10.0, decode_ms_per_token=0.5, prefill_ms_per_token=0.1)


def test_a_batch_splits_into_decoding_sequences_and_prompt_tokens():
    assert split_lengths([]) == (0, 0)
    assert split_lengths([1, 1, 1]) == (3, 0)
    assert split_lengths([32, 1, 1, 5]) == (2, 37)  # a prompt, two decodes, a chunk of another prompt
    # from positions alone, where vLLM gives no request boundaries
    assert split_positions([7]) == (1, 0)
    assert split_positions([5, 90, 17]) == (3, 0)
    assert split_positions([0, 1, 2, 3, 40, 12]) == (2, 4)


class FakeTime:
    """A clock that advances only when told; sleep() oversleeps by `late`, like a busy host waking a thread."""

    def __init__(self, late: float = 0.0) -> None:
        self.t = 0.0
        self.late = late
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s + self.late


def steps(pacer: Pacer, ft: FakeTime, n: int, compute: float, outside: float | list[float], idle_every: int = 0,
          idle: float = 0.0) -> list[float]:
    """Runs n forwards (compute inside; vLLM's own work after each, `outside`, or in turn from a list; an idle gap
    every idle_every); when each forward returned, its sleep done: the engine's step as its histograms see it."""
    out = []
    work = outside if isinstance(outside, list) else [outside]
    for i in range(n):
        started = ft.t
        ft.t += compute
        pacer.finish(started, decode=4, prefill=0)
        out.append(ft.t)
        ft.t += work[i % len(work)]
        ft.t += idle if idle_every and i % idle_every == idle_every - 1 else 0.0
    return out


def periods(out: list[float], skip: int = 3) -> list[float]:
    return [b - a for a, b in zip(out[skip:], out[skip + 1:], strict=False)]


def test_pacer_keeps_the_configured_step_between_tokens():
    """2 ms of compute inside forward, 3 ms of vLLM's own work between forwards and 1 ms of lateness in every
    sleep: all of it falls inside the step, so a token comes out every configured step (10 + 0.5 x 4 = 12 ms)."""
    ft = FakeTime(late=0.001)
    pacer = Pacer(StepTime(10.0, 0.5, 0.1), clock=ft.clock, sleep=ft.sleep)
    assert periods(steps(pacer, ft, 30, 0.002, 0.003)) == pytest.approx([0.012] * 26, abs=1e-6)
    assert pacer.stats["overruns"] == 0


def test_uneven_work_between_forwards_falls_inside_the_step_and_does_not_stretch_it():
    """vLLM's work between forwards is 2 ms in three steps of four and 6 ms in the fourth: paced to deadlines, each
    step still takes 12 ms from one token to the next. A pacer that took the work's median (2 ms) out of each sleep
    stretched every fourth step by 4 ms: 1 ms, 8%, on every step on average."""
    ft = FakeTime(late=0.0005)
    pacer = Pacer(StepTime(10.0, 0.5, 0.1), clock=ft.clock, sleep=ft.sleep)
    out = steps(pacer, ft, 41, 0.002, [0.002, 0.002, 0.002, 0.006])
    assert periods(out) == pytest.approx([0.012] * 37, abs=1e-6)


def test_a_late_wake_is_made_up_by_the_next_step():
    """One sleep wakes 3 ms late: that step's token is 3 ms late, the next step's window still closes on its
    deadline, so the tokens after it keep the configured step and none is lost or gained over the run."""

    class OneLate(FakeTime):
        def sleep(self, s: float) -> None:
            super().sleep(s)
            if len(self.slept) == 10:
                self.t += 0.003

    ft = OneLate()
    pacer = Pacer(StepTime(10.0, 0.5, 0.1), clock=ft.clock, sleep=ft.sleep)
    p = periods(steps(pacer, ft, 20, 0.002, 0.003), skip=0)
    assert p[8] == pytest.approx(0.015, abs=1e-6) and p[9] == pytest.approx(0.009, abs=1e-6)
    assert sum(p) == pytest.approx(0.012 * len(p), abs=1e-6)


def test_an_idle_gap_is_not_work_and_the_first_step_after_it_lasts_its_whole_time():
    """20 ms with no request every 16 steps: the step after it waits its whole 12 ms from vLLM's usual work before
    its forward (a request arriving at an idle GPU waits its whole first step), and no step is shortened."""
    ft = FakeTime()
    pacer = Pacer(StepTime(10.0, 0.5, 0.1), clock=ft.clock, sleep=ft.sleep)
    p = periods(steps(pacer, ft, 64, 0.002, 0.003, idle_every=16, idle=0.020))
    assert sorted(set(round(x, 6) for x in p)) == [0.012, 0.032]


def test_when_vllms_own_work_exceeds_the_step_the_pacer_stops_sleeping():
    ft = FakeTime()
    pacer = Pacer(StepTime(10.0, 0.5, 0.1), clock=ft.clock, sleep=ft.sleep)
    steps(pacer, ft, 40, 0.002, 0.015)  # 15 ms between forwards against a 12 ms step
    assert len(ft.slept) == 1 and pacer.stats["overruns"] == 39  # only the first step, before any gap was seen


def test_pacer_counts_a_step_it_cannot_honour_and_never_shortens_it():
    ft = FakeTime()
    pacer = Pacer(StepTime(1.0, 0.0, 0.0), clock=ft.clock, sleep=ft.sleep)
    ft.t += 0.005  # 5 ms of compute against a 1 ms step
    assert pacer.finish(0.0, decode=1, prefill=0) == 0.0
    assert pacer.stats["overruns"] == 1 and ft.slept == []


def test_step_reads_its_config_and_refuses_a_model_without_one():
    class Cfg:
        layerbench_step = {"base_ms": 9.35, "decode_ms_per_token": 0.206, "prefill_ms_per_token": 0.15}

    assert StepTime.from_config(Cfg()).ms(64, 0) == pytest.approx(9.35 + 64 * 0.206)
    with pytest.raises(ValueError, match="layerbench_step"):
        StepTime.from_config(object())


def test_profile_field_selects_the_model_and_needs_its_step():
    with pytest.raises(ValueError, match="needs engine.step"):
        EngineSettings(model="gpu-like")
    with pytest.raises(ValueError, match="gpu-like"):
        EngineSettings(model="tiny", step=STEP)
    auto = EngineSettings(step=STEP)  # auto with a step: the GPU-like engine where there is no GPU
    assert auto.on_host(False).model == "gpu-like" and auto.on_host(True).step is None
    p = load_profile("gpu-like")
    assert p.engine.model == "gpu-like" and p.engine.step is not None
    assert p.concurrency == [1, 8, 16, 32, 64] and p.requests == 100 and p.requests_per_concurrency == 8


def test_gpu_like_model_dir_links_the_tiny_model_and_names_the_plugin_architecture(tmp_path):
    from stacks.base.engine_model import model_dir

    tiny = tmp_path / "tiny-qwen2"
    tiny.mkdir()
    (tiny / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 2}))
    (tiny / "tokenizer.json").write_text("{}")
    engine = EngineSettings(model="gpu-like", step=STEP)
    d = model_dir(engine, tiny)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LayerbenchGpuLikeForCausalLM"] and cfg["num_hidden_layers"] == 2
    assert cfg["layerbench_step"] == {"base_ms": 10.0, "decode_ms_per_token": 0.5, "prefill_ms_per_token": 0.1}
    assert (d / "tokenizer.json").is_symlink() and (d / "tokenizer.json").resolve() == (tiny / "tokenizer.json")
    assert model_dir(engine, tiny) == d  # the same step, the same directory
    other = model_dir(EngineSettings(model="gpu-like", step=STEP.model_copy(update={"base_ms": 20.0})), tiny)
    assert other != d
    assert model_dir(EngineSettings(), tiny) == tiny
    with pytest.raises(LayerbenchError, match="make setup"):
        model_dir(engine, tmp_path / "missing")


def test_harness_and_plugin_agree_on_the_architecture_and_the_switch():
    """The harness cannot import the plugin (it lives in the engine environment): compare their constants."""
    from stacks.base import engine_model

    tree = ast.parse((PLUGIN / "layerbench_gpulike" / "__init__.py").read_text())
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets}
    assert consts["ARCHITECTURE"] == engine_model.GPU_LIKE_ARCHITECTURE
    assert consts["BLOCKING_WAIT_ENV"] == engine_model.BLOCKING_WAIT_ENV


def test_only_the_gpu_like_engine_blocks_its_queue_readers_and_it_runs_locally_only():
    from stacks.base import DeploySettings
    from stacks.base.engine_env import engine_env
    from stacks.base.engine_model import BLOCKING_WAIT_ENV, check_target

    gpu_like = EngineSettings(model="gpu-like", step=STEP)
    assert engine_env(DeploySettings(engine=gpu_like))[BLOCKING_WAIT_ENV] == "1"
    assert BLOCKING_WAIT_ENV not in engine_env(DeploySettings())
    check_target(gpu_like, "local")
    for target in ("docker", "k8s"):
        with pytest.raises(LayerbenchError, match="local target only"):
            check_target(gpu_like, target)


def scrape(phase: str, itl: tuple[float, float], steps: tuple[float, float]) -> dict:
    """itl: (sum s, count) of the inter-token histogram; steps: (tokens, steps) of vllm:iteration_tokens_total."""
    lab = "{engine=0}"
    return {"ok": True, "phase": phase, "level": 16, "samples": {
        f"vllm:inter_token_latency_seconds_sum{lab}": itl[0], f"vllm:inter_token_latency_seconds_count{lab}": itl[1],
        f"vllm:iteration_tokens_total_sum{lab}": steps[0], f"vllm:iteration_tokens_total_count{lab}": steps[1]}}


def test_window_step_figures_come_from_the_engine_histograms():
    from harness.analysis.server_metrics import summarise

    # 100 steps computing 1,700 tokens, 1,500 token gaps of 14 ms on average
    m = summarise([scrape("start", (1.0, 100), (50, 10)), scrape("end", (22.0, 1600), (1750, 110))])
    assert m.engine_steps == 100 and m.engine_step_tokens == 1700
    assert m.engine_itl_ms == pytest.approx(14.0)


def test_configured_step_follows_the_windows_mix_and_a_slow_level_is_flagged():
    from harness.analysis.emulation import configured_ms, step_checks
    from harness.reporting.emulation_report import step_line, step_table, step_warnings
    from harness.schemas import ServerLevelMetrics
    from tests.reporting.test_report_decision import compare, pair

    # 100 steps: 1,060 tokens generated, 640 prompt tokens -> 10.6 decoding sequences and 6.4 prompt tokens a step
    server = ServerLevelMetrics(engine_steps=100, engine_step_tokens=1700, generation_tokens=1060, prompt_tokens=640,
                                engine_itl_ms=15.0)
    assert configured_ms(STEP, server) == pytest.approx(10.0 + 0.5 * 10.6 + 0.1 * 6.4)
    assert configured_ms(STEP, ServerLevelMetrics()) is None  # the histogram hidden: nothing to check
    # 400 of the 640 prompt tokens came from the prefix cache: only 240 were prefilled, 2.4 a step
    cached = server.model_copy(update={"prefix_cache_hits": 400.0})
    assert configured_ms(STEP, cached) == pytest.approx(10.0 + 0.5 * 10.6 + 0.1 * 2.4)

    def windows(level: int, itl: float) -> list:
        out = pair(level, 100.0)
        for lv in out:
            lv.server = server.model_copy(update={"engine_itl_ms": itl})
        return out

    # configured 15.94 ms: 16.0 and 16.9 are kept, 30.0 was stretched, 12.0 undershot
    s = compare(windows(1, 16.0) + windows(16, 30.0), windows(1, 12.0) + windows(16, 16.9))
    s.emulated_step = STEP
    checks = {(c.side, c.level): c for c in step_checks(s)}
    assert len(checks) == 4
    assert [checks[k].kept for k in (("baseline", 1), ("baseline", 16), ("stack", 1), ("stack", 16))] == [
        True, False, False, True]
    warned = step_warnings(s)
    assert len(warned) == 2 and "stretched** (vllm at c=16)" in warned[0] and "short** (ray at c=1)" in warned[1]
    first = step_line(s)[0]
    assert first.startswith("**engine step emulated (gpu-like)**: 10 ms per step") and "2 of 4" in first
    (_, _, header, rows), = step_table(s)
    assert header[:6] == ["level", "deployment", "windows", "tokens per step", "configured ms", "measured ms"]
    assert sorted(r[8] for r in rows) == ["**short**", "**stretched**", "kept", "kept"]
    s.emulated_step = None  # the tiny model computes its step: nothing emulated, nothing said
    assert step_checks(s) == [] and step_line(s) == [] and step_table(s) == []


def test_a_window_whose_engine_counted_other_requests_is_left_out_of_the_step_check():
    """Ray's metrics agent exports with a lag: a window's deltas then mix in steps from before it (measured behind
    Ray Serve: 215 requests counted for the client's 100, and a step 2x the configured one)."""
    from harness.analysis.emulation import step_checks
    from harness.reporting.emulation_report import step_line, step_table
    from harness.schemas import ServerLevelMetrics
    from tests.reporting.test_report_decision import compare, pair

    def windows(level: int, itls: tuple[float, float], counted: tuple[int, int]) -> list:
        out = pair(level, 100.0)
        for lv, itl, n in zip(out, itls, counted, strict=True):
            lv.server = ServerLevelMetrics(engine_steps=100, engine_step_tokens=1700, generation_tokens=1060,
                                           prompt_tokens=640, engine_itl_ms=itl,
                                           engine_requests=n * lv.stats.succeeded)
        return out

    s = compare(windows(1, (16.0, 16.0), (1, 1)), windows(1, (16.0, 40.0), (1, 2)))
    s.emulated_step = STEP
    checks = {c.side: c for c in step_checks(s)}
    assert (checks["stack"].windows, checks["stack"].lagged) == (2, 1)
    assert checks["stack"].measured_ms == pytest.approx(16.0) and checks["stack"].kept  # not (16 + 40) / 2
    (_, _, _, rows), = step_table(s)
    assert sorted(r[2] for r in rows) == ["1 of 2", "2 of 2"]
    s2 = compare(windows(1, (16.0, 16.0), (1, 1)), windows(1, (40.0, 40.0), (2, 2)))
    s2.emulated_step = STEP
    stack = next(c for c in step_checks(s2) if c.side == "stack")
    assert stack.measured_ms is None and stack.kept is None  # every window lagged: not checked, not "stretched"
    assert "not checked at 1" in step_line(s2)[0]


def test_a_level_no_check_can_read_is_unchecked_and_the_client_reads_what_the_engine_hides():
    """Behind Triton the engine's step histograms are hidden, behind Ray every window of a level can lag: the
    client's TPOT p50 is then checked against the bare side's configured step; a level neither reads gets no
    verdict (20261201-155527's c=32, between two stretched levels behind Ray, was once called an overhead)."""
    from harness.analysis.conclude import Evidence, settle
    from harness.analysis.emulation import step_checks, stretched_levels, unchecked_levels
    from harness.schemas import Dist, ServerLevelMetrics
    from tests.reporting.test_report_decision import compare, pair

    visible = ServerLevelMetrics(engine_steps=100, engine_step_tokens=1700, generation_tokens=1060, prompt_tokens=640,
                                 engine_itl_ms=16.0)  # 15.94 ms configured

    def windows(level: int, server: ServerLevelMetrics, tpot: float | None) -> list:
        out = pair(level, 100.0)
        for lv in out:
            lv.server = server
            lv.stats.tpot_ms = Dist(n=40, p50=tpot)
        return out

    def summary(stack_tpot: float | None):
        s = compare(windows(1, visible, 16.1) + windows(4, visible, 16.1),
                    windows(1, ServerLevelMetrics(), stack_tpot) + windows(4, visible, 16.1))
        s.emulated_step = STEP
        return s

    hidden = summary(None)  # c=1: the stack hides its engine and the client's TPOT is missing
    assert unchecked_levels(hidden) == {1} and not stretched_levels(hidden)
    read = summary(16.3)
    check = next(c for c in step_checks(read) if c.side == "stack" and c.level == 1)
    assert check.source == "client" and check.configured_ms == pytest.approx(15.94) and check.kept
    assert not unchecked_levels(read)
    assert stretched_levels(summary(30.0)) == {1}  # the client's TPOT 88% past the configured step

    profile = load_profile("quick").with_levels([1, 4])
    done = settle(hidden, profile, Evidence(scrapes=[], live={}), allow_mismatch=False)
    by = {lv.concurrency: lv for lv in done.levels}
    assert by[1].verdict == "unchecked" and "TPOT" in by[1].why and not by[1].endpoints
    assert by[4].verdict != "unchecked" and by[4].endpoints
