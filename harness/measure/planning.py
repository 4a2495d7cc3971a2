"""A compare's plan, before anything is deployed: how many deployment pairs it takes on this host to detect the
profile's `target_mde` in throughput at every level, how long that is, and what the budget can detect.

The noise is this host's own: the variance of one pair's throughput difference (deployment and window effects,
harness.analysis.verdict.components) from the latest A/A of the profile (`make compare STACK=vllm`); without one,
the compare plans again from its own first two pairs. A pair's time is measured (the latest compare of the same
profile and stack), or for the GPU-like engine estimated from its emulated step. The detectable effect of K
pairs is the one the sequential design's last look finds with 80% power at Holm's strictest level (5% / the
levels): (t at the boundary + t at 80%) x the standard error of K counterbalanced pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.conclude import pair_order
from harness.analysis.sequential import Look, detectable
from harness.errors import LayerbenchError
from harness.profile.schema import LoadProfile
from harness.schemas import AAReference, CompareSummary, Components

MOST = 64  # the most pairs a plan considers (the profile's max_pairs bound)
PLAN_LOOKS = 10
# seconds a deployment takes to be ready here, by stack, where no compare of the profile measured it yet (the
# 2-core host, eager engine: bare vLLM 36-51 s; Ray Serve 86-96 s, its cluster and its replica's engine)
START_S = {"vllm": 45.0, "ray": 95.0}
START_DEFAULT_S = 60.0


def share(x: float) -> float:
    return math.expm1(x)


def pair_factor(k: int) -> float:
    """The balanced estimate's variance over one pair difference's, for k pairs in counterbalanced order."""
    order = pair_order(k)
    ab, ba = sum(o > 0 for o in order), sum(o < 0 for o in order)
    return (1 / ab + 1 / ba) / 4 if ab and ba else 1 / k


def detectable_share(comp: Components, k: int, levels: int, alpha: float = 0.05) -> float:
    """The throughput effect (a share) k pairs detect with 80% power at every one of `levels` levels."""
    if k < 2:
        return math.inf
    se = math.sqrt(comp.variance * pair_factor(k))
    df = comp.df + (k - 1) * levels  # the host's A/A pooled with the compare's own pairs x levels
    # the last boundary of k - 1 even looks; past PLAN_LOOKS it barely moves (2.03 at 5 looks, 2.05 at 10), and
    # computing every look of a 64-pair design would take seconds per k
    n = min(k - 1, PLAN_LOOKS)
    look = Look(pairs=k, fractions=tuple((j + 1) / n for j in range(n)))
    return share(detectable(se, df, look, alpha / max(1, levels)))


def pairs_for(comp: Components, target: float, levels: int) -> int | None:
    """The fewest pairs that detect `target` at every level; None when MOST do not."""
    return next((k for k in range(2, MOST + 1) if detectable_share(comp, k, levels) <= target), None)


def step_sweep_s(profile: LoadProfile) -> float | None:
    """The GPU-like engine's sweep time from its emulated step: each level's windows (and one warm-up wave) of
    closed-loop requests, each `output_tokens` steps of base + decode x c (prefill left out: short prompts)."""
    step, out = profile.engine.step, profile.output_tokens
    if step is None or profile.open_loop or not isinstance(out, int):
        return None
    total = 0.0
    for c in profile.concurrency:  # the windows, their warm-up waves, and a compiled engine's warm-up sweep
        waves = profile.requests_for(c) / c + profile.warmup_waves + profile.warms_every_level()
        total += max(profile.min_duration_s, waves * out * step.ms(min(c, profile.engine.max_num_seqs)) / 1e3)
    return total


def pair_seconds(profile: LoadProfile, stack: str, results: Path) -> tuple[float | None, str]:
    """(seconds one pair takes, where the figure comes from): the latest compare of the profile and stack, else
    the A/A's (bare vLLM on both sides: a layer's own start adds to it), else an estimate."""
    for kind in dict.fromkeys((stack, "vllm")):
        found = _measured_pair(profile, kind, results)
        if found is not None:
            seconds, run_id = found
            return seconds, f"measured by {run_id}" + ("" if kind == stack else ", bare vLLM on both sides")
    sweep = step_sweep_s(profile)
    if sweep is None:
        return None, "not known until the first pair"
    start = START_S.get(stack, START_DEFAULT_S)
    return 2 * (start + sweep), (f"estimated: {start:.0f} s to start and {sweep:.0f} s to sweep the emulated step, "
                                 "per deployment")


def _measured_pair(profile: LoadProfile, stack: str, results: Path) -> tuple[float, str] | None:
    for path in sorted(results.glob(f"*compare-{stack}-*/compare.json"), reverse=True):
        try:
            s = CompareSummary.model_validate_json(path.read_text())
        except ValueError:
            continue
        if s.status != "complete" or s.profile != profile.name or s.deployments != "sequential":
            continue
        if s.stopping and s.stopping.pair_s:
            return sum(s.stopping.pair_s) / len(s.stopping.pair_s), s.run_id
        if s.wall_s and s.pairs:
            return s.wall_s / s.pairs, s.run_id
    return None


@dataclass
class Plan:
    target: float  # share
    levels: int
    max_pairs: int
    budget_s: float | None
    pair_s: float | None
    pair_source: str
    noise: Components | None
    noise_source: str

    @property
    def budget_pairs(self) -> int:
        if self.budget_s is None or not self.pair_s:
            return self.max_pairs
        return min(self.max_pairs, int(self.budget_s // self.pair_s))

    @property
    def needed(self) -> int | None:
        return pairs_for(self.noise, self.target, self.levels) if self.noise else None

    def lines(self) -> list[str]:
        out = []
        minutes = (lambda k: f", about {k * self.pair_s / 60:.0f} min") if self.pair_s else (lambda k: "")
        if self.noise is None:
            out.append(f"plan: no A/A of this profile on this host yet ({self.noise_source}): the pairs follow from "
                       "the compare's own first two pairs; `make compare STACK=vllm` stores one")
        else:
            need = self.needed
            out.append(f"plan: to detect {100 * self.target:g}% in throughput at every level you need about "
                       + (f"{need} pairs{minutes(need)}" if need else f"more than {MOST} pairs")
                       + f" ({self.noise_source}; a pair {self._pair_text()})")
            k = self.budget_pairs
            if k >= 2:
                why = (f"the budget you set ({self.budget_s / 60:g} min)" if self.budget_s and k < self.max_pairs
                       else f"max_pairs {self.max_pairs}")
                out.append(f"plan: with {why}, {k} pairs{minutes(k)}, you can detect "
                           f"{100 * detectable_share(self.noise, k, self.levels):.1f}%")
        return out

    def _pair_text(self) -> str:
        return f"~{self.pair_s / 60:.1f} min, {self.pair_source}" if self.pair_s else self.pair_source

    def refusal(self) -> str | None:
        """Why the compare cannot keep its promise before anything is deployed, with the numbers; None if it can."""
        if self.budget_s is not None and self.pair_s and self.budget_s < 2 * self.pair_s:
            return (f"BUDGET {self.budget_s / 60:g} min is shorter than two deployment pairs (~{self.pair_s / 60:.1f} "
                    f"min each, {self.pair_source}), the fewest that give a verdict an interval")
        need = self.needed
        if self.noise is not None and (need is None or need > self.budget_pairs):
            can = detectable_share(self.noise, self.budget_pairs, self.levels)
            return (f"a {100 * self.target:g}% detectable effect needs "
                    + (f"{need} pairs" if need else f"more than {MOST} pairs")
                    + f" on this host ({self.noise_source}); {self.budget_pairs} fit "
                    + (f"the budget of {self.budget_s / 60:g} min" if self.budget_s else "max_pairs")
                    + f", which detect {100 * can:.1f}%. Raise BUDGET (or max_pairs), set MDE to "
                    f"{100 * can:.1f}% or more, or pass --anyway")
        return None


def make_plan(profile: LoadProfile, stack: str, results: Path, aa: AAReference | None) -> Plan:
    pair_s, pair_source = pair_seconds(profile, stack, results)
    comp = aa.components.get("throughput") if aa else None
    return Plan(target=profile.target_mde, levels=len(profile.levels()), max_pairs=profile.max_pairs,
                budget_s=profile.budget_min * 60 if profile.budget_min else None, pair_s=pair_s,
                pair_source=pair_source, noise=comp,
                noise_source=f"the noise of A/A {aa.run_id}" if comp else "none stored under results/")


def check_plan(plan: Plan, anyway: bool) -> None:
    """A budget shorter than two pairs is refused always; a target it cannot reach, unless `anyway`."""
    why = plan.refusal()
    if why and (not anyway or why.startswith("BUDGET")):
        raise LayerbenchError(why)
