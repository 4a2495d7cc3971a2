"""Per level, what a compare concludes from both sides' windows: the three co-primary endpoints' verdicts
(harness.analysis.judging, harness.analysis.verdict), the level's verdict (its significant endpoints), each
side's means,
where the CPU went, and which windows were not steady. A level the run could not honour (the client out of
CPU, or the host stretching a GPU-like engine's step) carries no verdict."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.analysis.judging import ENDPOINTS, Design, judge_endpoints
from harness.analysis.replicas import routing
from harness.analysis.steady import likely_cause
from harness.analysis.verdict import pct
from harness.schemas import Components, DeltaInterval, LevelDelta, LevelSummary, RunSummary, Verdict


def _cores(levels: list[LevelSummary]) -> tuple[dict[str, float], float | None]:
    """Mean cores per process label over the windows of one level (CPU seconds / window)."""
    acc: dict[str, list[float]] = {}
    for lv in levels:
        for label, cpu_s in lv.process_cpu_s.items():
            acc.setdefault(label, []).append(cpu_s / lv.window_s if lv.window_s else 0.0)
    client = [lv.client.cpu_pct / 100 for lv in levels]
    return {k: float(np.mean(v)) for k, v in sorted(acc.items())}, (float(np.mean(client)) if client else None)


GPU_KEYS = ("util_pct_mean", "memory_used_mib_max", "power_w_mean", "sm_clock_mhz_mean", "tensor_active_mean")


def gpu_means(levels: list[LevelSummary]) -> dict[str, float | None]:
    """One level's GPU telemetry on one side: the mean over its windows of the mean (the max for memory) over its
    GPUs; {} where none was read."""
    out: dict[str, float | None] = {}
    for key in GPU_KEYS:
        per_window = []
        for lv in levels:
            vals = [getattr(g, key) for g in lv.gpu if getattr(g, key) is not None]
            if vals:
                per_window.append(max(vals) if key == "memory_used_mib_max" else float(np.mean(vals)))
        if per_window:
            out[key] = float(np.mean(per_window))
    return out


def _unsteady(levels: list[LevelSummary]) -> list[str]:
    return [f"{_window(lv)}: " + "; ".join(lv.stats.steady.reasons) + " — likely cause: "
            + likely_cause(lv.stats.steady, lv.stats.ttft_modes, lv.client.starved) for lv in levels
            if lv.stats.steady.steady is False]


def _window(lv: LevelSummary) -> str:
    return f"pair {lv.pair + 1}" if lv.pair else f"r{lv.stats.repeat + 1}"


def combined(vs: dict[str, Verdict]) -> tuple[str, str | None]:
    """The level's verdict: overhead when an endpoint is one and none is a gain, gain when one is and none is an
    overhead, mixed when both (the label never contradicts an endpoint's significant effect: "TTFT p95 gain,
    throughput overhead"), equivalent when all three are, else inconclusive; with the endpoints behind it."""
    names = {ep.key: ep.name for ep in ENDPOINTS}
    hit = {call: [names[k] for k, v in vs.items() if v.verdict == call] for call in ("overhead", "gain")}
    if hit["overhead"] and hit["gain"]:
        return "mixed", f"{', '.join(hit['gain'])} gain, {', '.join(hit['overhead'])} overhead"
    for call in ("overhead", "gain"):
        if hit[call]:
            return call, ", ".join(hit[call])
    if vs and all(v.verdict == "equivalent" for v in vs.values()):
        return "equivalent", None
    return "inconclusive", None


def interval(v: Verdict | None) -> DeltaInterval | None:
    if v is None or v.se is None:
        return None
    source = f"{v.pairs} deployment pair{'s' if v.pairs != 1 else ''}"
    return DeltaInterval(delta_pct=pct(v.estimate), lo_pct=pct(v.lo), hi_pct=pct(v.hi), df=v.df,
                         n_baseline=v.pairs, n_stack=v.pairs, source=source)


def level_deltas(base: RunSummary | None, stack: RunSummary | None, levels: Sequence[float],
                 open_loop: bool | None = None, **how) -> list[LevelDelta]:
    """judged_levels' levels alone; how: the Design's fields (host, margin, ...)."""
    return judged_levels(base, stack, levels, open_loop, Design(**how))[0]


def judged_levels(base: RunSummary | None, stack: RunSummary | None, levels: Sequence[float],
                  open_loop: bool | None = None, design: Design | None = None, no_verdict: dict | None = None
                  ) -> tuple[list[LevelDelta], dict[str, Components]]:
    """One LevelDelta per level (concurrencies, or offered rates when the runs are open-loop), and this compare's
    own variance components. design: the pairs' order, the host's A/A, the margins and a sequential compare's look;
    no_verdict: level -> why it gets none (host-bound, client-bound)."""
    if open_loop is None:
        open_loop = bool((base and base.open_loop) or (stack and stack.open_loop))
    no_verdict = dict(no_verdict or {})
    judged = [c for c in levels if c not in no_verdict]
    verdicts, own = judge_endpoints(base, stack, judged, design or Design())
    out = []
    for c in levels:
        b_all = [lv for lv in (base.levels if base else []) if lv.stats.level == c]
        s_all = [lv for lv in (stack.levels if stack else []) if lv.stats.level == c]
        # a level stopped mid-way (its deployment died) is listed, but its figures are not a measurement
        b = [lv for lv in b_all if lv.incomplete is None]
        s = [lv for lv in s_all if lv.incomplete is None]
        vs = {k: v[judged.index(c)] for k, v in verdicts.items()} if c in judged else {}
        tp = vs.get("throughput")
        if not b or not s:
            verdict, why = "missing", None
        elif c in no_verdict:
            verdict, why = no_verdict[c]
        else:
            verdict, why = combined(vs)

        def mean(levels: list[LevelSummary], f) -> float | None:
            vals = [f(lv) for lv in levels if f(lv) is not None]
            return float(np.mean(vals)) if vals else None

        b_cores, b_client = _cores(b)
        s_cores, s_client = _cores(s)
        ci = interval(tp) if b and s else None
        bt, st = mean(b, lambda lv: lv.stats.judged_tok_s), mean(s, lambda lv: lv.stats.judged_tok_s)
        delta = pct(tp.estimate) if tp is not None and tp.estimate is not None else (
            100.0 * (st - bt) / bt if bt and st is not None else None)
        out.append(LevelDelta(
            concurrency=0 if open_loop else int(c), rate=float(c) if open_loop else None,
            baseline_tok_s=bt, stack_tok_s=st, delta_pct=delta if b and s else None, ci=ci,
            noise_pct=ci.half_width_pct if ci else None, verdict=verdict, endpoints=vs, why=why,
            pairs=tp.pairs if tp else 0,
            baseline_not_steady=_unsteady(b), stack_not_steady=_unsteady(s),
            baseline_modes=[f"{_window(lv)}: {lv.stats.ttft_modes.text()}" for lv in b if lv.stats.ttft_modes],
            stack_modes=[f"{_window(lv)}: {lv.stats.ttft_modes.text()}" for lv in s if lv.stats.ttft_modes],
            baseline_ttft_p95_ms=mean(b, lambda lv: lv.stats.ttft_ms.p95),
            stack_ttft_p95_ms=mean(s, lambda lv: lv.stats.ttft_ms.p95),
            baseline_goodput=mean(b, lambda lv: lv.stats.goodput), stack_goodput=mean(s, lambda lv: lv.stats.goodput),
            baseline_good_rps=mean(b, lambda lv: lv.stats.good_rps),
            stack_good_rps=mean(s, lambda lv: lv.stats.good_rps),
            baseline_cpu_cores=b_cores, stack_cpu_cores=s_cores,
            baseline_client_cores=b_client, stack_client_cores=s_client,
            baseline_e2e_p95_ms=mean(b, lambda lv: lv.stats.e2e_ms.p95),
            stack_e2e_p95_ms=mean(s, lambda lv: lv.stats.e2e_ms.p95),
            scheduled_rate=mean(b + s, lambda lv: lv.stats.scheduled_rate),
            baseline_achieved_rate=mean(b, lambda lv: lv.stats.achieved_rate),
            stack_achieved_rate=mean(s, lambda lv: lv.stats.achieved_rate),
            invocations=sorted({lv.invocation for lv in b + s}),
            baseline_gpu=gpu_means(b), stack_gpu=gpu_means(s),
            baseline_routing=routing(b), stack_routing=routing(s),
            incomplete=[f"{side} {_window(lv)}: {lv.incomplete} ({lv.stats.sent} sent)"
                        for side, levels in (("baseline", b_all), ("stack", s_all)) for lv in levels
                        if lv.incomplete],
        ))
    return out, own


def client_bound(base: RunSummary | None, stack: RunSummary | None) -> dict:
    """Levels where either side's client ran out of CPU in a window: the figures are the client's."""
    return {c: ("client-bound", "no verdict: the load client ran out of CPU in a window here, so the figures are "
                "the client's as much as the server's")
            for run in (base, stack) if run for c in run.client_saturated_levels}
