"""The GPU-like engine's step (engine.model: gpu-like), checked level by level: what the profile configured for the
window's mix of work against what the engine's own histograms measured.

- Configured: base + decode cost × decoding sequences per step + prefill cost × prefilled tokens per step, the mix
  taken from the window itself: steps from vllm:iteration_tokens_total's count, generated and prompt tokens from
  vllm:generation_tokens_total and vllm:prompt_tokens_total, less the prompt tokens the prefix cache served
  (vllm:prefix_cache_hits_total), their deltas over the window.
- Measured: the engine's mean inter-token latency, which is its step time while decoding.
Both only over the windows whose engine counters counted the client's requests (within 10%): behind a layer whose
exporter lags (Ray's metrics agent), a window's deltas mix in steps from before it.

A level whose measured step is off the configured one by more than TOLERANCE is flagged: longer, it was stretched
(this host's real work per step, vLLM's scheduling, sampling and output processing, the API server and the layer
on the same cores, did not fit in the emulated step, so at that level the figures are this host's, not the
emulated GPU's); shorter, the pacing undershot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from pydantic import BaseModel

from harness.analysis.latency_split import counted_off, mean_of
from harness.profile.engine import EmulatedStep
from harness.schemas import LevelSummary, RunSummary, ServerLevelMetrics
from harness.schemas.window import TOLERANCE

WORKER, ENGINE_CORE = "VLLM::Worker", "VLLM::EngineCore"  # vLLM's process titles, the CPU table's labels end so


class StepCheck(BaseModel):
    side: str
    level: int | float  # a concurrency, or an open-loop rate
    configured_ms: float | None  # the configured step for this window's mix (mean over repeats)
    measured_ms: float | None  # the engine's mean inter-token latency
    tokens_per_step: float | None
    windows: int  # complete windows at this level
    lagged: int  # of which the engine's counters covered other requests than the client's: left out
    worker_cores: float | None
    engine_core_cores: float | None
    # engine: the engine's own mean inter-token latency against the step configured for its windows' mix; client:
    # where the engine's histograms are hidden (Triton) or every window lagged (Ray's exporter), the client's TPOT
    # p50 against the step configured for the bare engine's mix at the same level (the same offered load). On the
    # 2-core host the two agreed within 2% on every side-level where both were read (2026-12-06: kserve,
    # vllm-router, Ray and Triton's bare sides at c=1, 2, 16), and behind Ray at c=16 both read stretched.
    source: str = "engine"

    @property
    def off_pct(self) -> float | None:
        if self.configured_ms is None or self.measured_ms is None:
            return None
        return 100.0 * (self.measured_ms / self.configured_ms - 1.0)

    @property
    def kept(self) -> bool | None:
        """Within TOLERANCE of the configured step; None when either side of the check is not visible."""
        return None if self.off_pct is None else abs(self.off_pct) <= 100 * TOLERANCE

    @property
    def stretched(self) -> bool:
        return self.off_pct is not None and self.off_pct > 100 * TOLERANCE


def configured_ms(step: EmulatedStep, server: ServerLevelMetrics) -> float | None:
    """The mean configured step over the window's steps, from its own mix of generated and prompt tokens; None
    when the engine's step histogram or token counters are not visible."""
    if not server.engine_steps or server.generation_tokens is None or server.prompt_tokens is None:
        return None
    # a prompt's tokens found in the prefix cache are not prefilled: vLLM schedules only the rest, and the step
    # sleeps for what it runs (measured without this, a shared-prefix profile read every step 29-60% "short")
    prefilled = server.prompt_tokens - min(server.prompt_tokens, server.prefix_cache_hits or 0.0)
    return step.ms(server.generation_tokens / server.engine_steps, prefilled / server.engine_steps)


def _cores(cpu: dict[str, float], title: str) -> float | None:
    got = [v for k, v in cpu.items() if k.endswith(title)]
    return sum(got) if got else None


class Compared(Protocol):
    """What the check reads of a compare (harness.procedures.compare.CompareSummary): its step, its sides' runs, and its
    levels' CPU per process (`<side>_cpu_cores`, where known)."""

    emulated_step: EmulatedStep | None
    runs: Mapping[str, RunSummary]
    levels: Sequence


def stretched_levels(s: Compared) -> set[int | float]:
    """Levels whose step this host stretched on either side: they measure the host, not the emulated GPU."""
    return {c.level for c in step_checks(s) if c.stretched}


def unchecked_levels(s: Compared) -> set[int | float]:
    """Levels the check could not read on some side, from the engine or the client: whether this host stretched
    the emulated step there is unknown, so they get no verdict (a level between two stretched ones behind Ray,
    its exporter lagging, was once the README's headline)."""
    return {c.level for c in step_checks(s) if c.kept is None}


def step_checks(s: Compared) -> list[StepCheck]:
    """One row per side and level that measured complete windows; [] when the engine's step was not emulated."""
    step = s.emulated_step
    if step is None:
        return []
    out = []
    for label, run in s.runs.items():
        by_level: dict[float, list[LevelSummary]] = {}
        for lv in run.levels:
            if lv.incomplete is None:
                by_level.setdefault(lv.stats.level, []).append(lv)
        for level, lvs in sorted(by_level.items()):
            delta = next((d for d in s.levels if d.level == level), None)
            cpu = getattr(delta, f"{label}_cpu_cores") if delta else {}
            # a lagging exporter's window mixes in steps from before it: its mean says nothing about the level
            good = [lv for lv in lvs if not counted_off(lv)]
            out.append(StepCheck(
                side=label, level=level,
                configured_ms=mean_of([configured_ms(step, lv.server) for lv in good]),
                measured_ms=mean_of([lv.server.engine_itl_ms for lv in good]),
                tokens_per_step=mean_of([lv.server.engine_step_tokens / lv.server.engine_steps
                                         if lv.server.engine_steps and lv.server.engine_step_tokens is not None
                                         else None for lv in good]),
                windows=len(lvs), lagged=len(lvs) - len(good),
                worker_cores=_cores(cpu, WORKER), engine_core_cores=_cores(cpu, ENGINE_CORE)))
    return _from_client(out, s)


def _from_client(checks: list[StepCheck], s: Compared) -> list[StepCheck]:
    """Each check the engine could not give, from the client's TPOT p50 against the bare side's configured step at
    the level, where both are known."""
    bare = {c.level: c.configured_ms for c in checks if c.side == "baseline" and c.source == "engine"}
    out = []
    for c in checks:
        if c.kept is None and bare.get(c.level) is not None:
            tpot = mean_of([lv.stats.tpot_ms.p50 for lv in s.runs[c.side].levels
                            if lv.incomplete is None and lv.stats.level == c.level])
            if tpot is not None:
                c = c.model_copy(update={"configured_ms": bare[c.level], "measured_ms": tpot, "source": "client"})
        out.append(c)
    return out
