"""A compare's plan, before anything is deployed: how many deployment pairs it takes on this host to detect the
profile's `target_mde` in throughput at every level, how long that is, and what the budget can detect.

The noise is this host's own: the variance of one pair's throughput difference (deployment and window effects,
harness.analysis.verdict.components) from the nearest evidence: the latest A/A of the profile (`make compare
STACK=vllm`), else this stack's latest compare of it, else another stack's; with none, the compare plans again from
its own first two pairs. Each side's start (cold and warm), sweep, profiled windows and teardown are measured (the
latest compare of the same profile and stack; bare vLLM's from any), or for the GPU-like engine estimated from its
emulated step (harness.measure.budget). Whatever the budget, the minimum design (2 pairs) runs. The detectable
effect of K pairs is the one the sequential design's last look finds with 80% power at Holm's strictest level for
throughput (its 60% of the compare's one 5% budget, over the levels: harness.analysis.judging.WEIGHTS): (t at the
boundary + t at 80%) x the standard error of K counterbalanced pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.conclude import pair_order
from harness.analysis.judging import WEIGHTS
from harness.analysis.sequential import Look, detectable
from harness.analysis.verdict import order_factor
from harness.errors import LayerbenchError
from harness.measure.budget import MIN_PAIRS, SIDES, Clock, SideTimes
from harness.profile.schema import LoadProfile
from harness.schemas import AAReference, CompareSummary, Components

MOST = 64  # the most pairs a plan considers (the profile's max_pairs bound)
PLAN_LOOKS = 10
# seconds from deploy to ready here, (cold, warm), by stack, where no compare of the profile measured it yet: the
# 2-core host, quick's compiled GPU-like engine, each side's compile cache kept across its deployments (measured
# 2026-12-06: bare vLLM 66 s cold, 30 s warm; Ray Serve 103 s and 77 s, its cluster and its replica's engine)
START_S = {"vllm": (66.0, 30.0), "ray": (103.0, 77.0)}
START_DEFAULT_S = (80.0, 45.0)
TEARDOWN_S = 4.0  # stop, and the check that its processes and ports are gone (2.4-4.8 s measured then)
# a profiled window costs more than a judged one: py-spy attaches to every busy process, and each level's
# collapsed stacks are written out after it
PROFILED_EXTRA_S = 6.0


def share(x: float) -> float:
    return math.expm1(x)


def pair_factor(k: int) -> float:
    """The balanced estimate's variance over one pair difference's, for k pairs in counterbalanced order."""
    return order_factor(pair_order(k))


def detectable_share(comp: Components, k: int, levels: int, alpha: float = 0.05) -> float:
    """The throughput effect (a share) k pairs detect with 80% power at every one of `levels` levels."""
    if k < 2:
        return math.inf
    se = math.sqrt(comp.variance * pair_factor(k))
    # each level is judged by its own pairs (k - 1 df) pooled with the A/A's at that level (its pairs - 1), not by a
    # residual pooled over the levels (harness.analysis.verdict.level_noise)
    df = max(0, comp.pairs - 1) + (k - 1)
    # the last boundary of k - 1 even looks; past PLAN_LOOKS it barely moves (2.03 at 5 looks, 2.05 at 10), and
    # computing every look of a 64-pair design would take seconds per k
    n = min(k - 1, PLAN_LOOKS)
    look = Look(pairs=k, fractions=tuple((j + 1) / n for j in range(n)))
    return share(detectable(se, df, look, alpha * WEIGHTS["throughput"] / max(1, levels)))


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


def step_profiled_s(profile: LoadProfile) -> float | None:
    """The profiled windows' seconds from the emulated step: one window per level, no warm-up."""
    step, out = profile.engine.step, profile.output_tokens
    if step is None or profile.open_loop or not isinstance(out, int):
        return None
    return sum(max(profile.min_duration_s, profile.requests_for(c) / c * out
                   * step.ms(min(c, profile.engine.max_num_seqs)) / 1e3) + PROFILED_EXTRA_S
               for c in profile.concurrency)


def estimated(profile: LoadProfile, stack: str) -> dict[str, SideTimes] | None:
    sweep, profiled = step_sweep_s(profile), step_profiled_s(profile)
    if sweep is None or profiled is None:
        return None
    return {label: SideTimes(cold_s=START_S.get(kind, START_DEFAULT_S)[0], warm_s=START_S.get(kind, START_DEFAULT_S)[1],
                             judged_s=sweep, profiled_s=profiled, other_s=TEARDOWN_S)
            for label, kind in (("baseline", "vllm"), ("stack", stack))}


def timings(profile: LoadProfile, stack: str, results: Path) -> Clock | None:
    """Each side's seconds before anything is deployed: the latest compare of the profile and stack that kept its
    deployments' times; for the baseline side, failing that, any such compare's (it is bare vLLM in every one);
    else the estimate from the emulated step. None: not known until the first pair."""
    est = estimated(profile, stack)
    mine, other = _measured_sides(profile, stack, results), _measured_sides(profile, None, results)
    if mine is not None:
        return Clock(prior=mine[0], source=f"measured by {mine[1]}")
    if other is not None and est is not None:
        return Clock(prior={"baseline": other[0]["baseline"], "stack": est["stack"]},
                     source=f"bare vLLM measured by {other[1]}; {stack} estimated")
    if est is None:
        return None
    b, t = est["baseline"], est["stack"]
    return Clock(prior=est, source=(f"estimated: starts {b.cold_s:.0f} s cold, {b.warm_s:.0f} s warm (bare vLLM), "
                                    f"{t.cold_s:.0f}/{t.warm_s:.0f} s ({stack}); a sweep {b.judged_s:.0f} s from the "
                                    "emulated step"))


def _measured_sides(profile: LoadProfile, stack: str | None, results: Path) -> tuple[dict[str, SideTimes], str] | None:
    for path in sorted(results.glob(f"*compare-{stack or '*'}-*/compare.json"), reverse=True):
        try:
            s = CompareSummary.model_validate_json(path.read_text())
        except ValueError:
            continue
        if s.profile != profile.name or s.deployments != "sequential" or not s.stopping:
            continue
        clock = Clock(prior={}, source="", deployments=list(s.stopping.deployments))
        if all(any(d.side == x and not d.profile_only for d in clock.deployments) for x in SIDES):
            return {x: clock.side(x) for x in SIDES}, s.run_id
    return None


@dataclass
class Plan:
    target: float  # share
    levels: int
    max_pairs: int
    budget_s: float | None
    clock: Clock | None  # each side's seconds, from evidence; None: not known until the first pair
    noise: Components | None
    noise_source: str
    noise_assumes: str = ""  # what the noise's source assumes about this compare's deployments
    from_aa: bool = True  # the noise is an A/A's: a target it cannot reach is refused (another compare's: said)
    profiling: bool = True
    min_pairs: int = MIN_PAIRS

    @property
    def pair_s(self) -> float | None:
        """A warm pair's seconds (the first pair starts cold)."""
        return sum(self.clock.prior[x].deployment(True) for x in SIDES) if self.clock else None

    def pairs_s(self, k: int) -> float | None:
        """k pairs' seconds, the first cold, without profiled windows."""
        if self.clock is None:
            return None
        return sum(self.clock.prior[x].deployment(False) + (k - 1) * self.clock.prior[x].deployment(True)
                   for x in SIDES)

    @property
    def budget_pairs(self) -> int:
        """The pairs the budget holds, never fewer than the minimum (which runs anyway)."""
        if self.budget_s is None or self.clock is None:
            return self.max_pairs
        fit = next((k - 1 for k in range(1, self.max_pairs + 1) if (self.pairs_s(k) or 0) > self.budget_s),
                   self.max_pairs)
        return max(self.min_pairs, min(self.max_pairs, fit))

    @property
    def needed(self) -> int | None:
        return pairs_for(self.noise, self.target, self.levels) if self.noise else None

    def lines(self) -> list[str]:
        out = []
        minutes = (lambda k: f", about {(self.pairs_s(k) or 0) / 60:.0f} min") if self.clock else (lambda k: "")
        if self.noise is None:
            out.append(f"plan: no A/A or earlier compare of this profile on this host ({self.noise_source}): the pairs "
                       "follow from the compare's own first two; `make compare STACK=vllm` stores an A/A")
        else:
            need = self.needed
            out.append(f"plan: to detect {100 * self.target:g}% in throughput at every level you need about "
                       + (f"{need} pairs{minutes(need)}" if need else f"more than {MOST} pairs")
                       + f" (noise: {self.noise_source}{'; ' + self.noise_assumes if self.noise_assumes else ''})")
        out.append(self.minimum_line())
        if self.profiling and self.clock is not None:
            out.append(f"plan: the profiled windows, once per side, about {self.clock.profiling_s() / 60:.1f} min in "
                       "all, run where they push no pair out of the budget: in a pair's first deployment from pair "
                       f"{self.min_pairs} on where the budget holds as many further pairs with them as without, "
                       "else in the deployment up when the compare stops, else in a short pass of their own")
        if self.noise is not None:
            k = self.budget_pairs
            why = (f"the budget you set ({self.budget_s / 60:g} min)" if self.budget_s and k < self.max_pairs
                   else f"max_pairs {self.max_pairs}")
            out.append(f"plan: with {why}, {k} pairs{minutes(k)}, you can detect "
                       f"{100 * detectable_share(self.noise, k, self.levels):.1f}%")
        return out

    def minimum_line(self) -> str:
        k = self.min_pairs
        took = self.pairs_s(k)
        head = f"plan: the minimum, {k} pairs (one in each order: an interval of the pair effect needs both)"
        if took is None:
            return head + ", runs whatever the budget; a pair's time is not known until the first"
        where = f"takes about {took / 60:.1f} min here ({self.clock.source if self.clock else ''})"
        if self.budget_s is None:
            return f"{head}, {where}"
        if took > self.budget_s:
            return f"{head}, {where}, past your budget of {self.budget_s / 60:g} min: it runs anyway"
        return f"{head}, {where}, within your budget of {self.budget_s / 60:g} min"

    def refusal(self) -> str | None:
        """Why the compare cannot keep its promise before anything is deployed, with the numbers; None if it can."""
        warm = self.pair_s
        if self.budget_s is not None and warm and self.budget_s < warm:
            return (f"BUDGET {self.budget_s / 60:g} min is shorter than one warm deployment pair (~{warm / 60:.1f} "
                    f"min, {self.clock.source if self.clock else ''}); the minimum, {self.min_pairs} pairs, would run "
                    "far past it. Raise BUDGET, or pass --anyway to run the minimum regardless")
        need = self.needed
        if self.noise is not None and self.from_aa and (need is None or need > self.budget_pairs):
            can = detectable_share(self.noise, self.budget_pairs, self.levels)
            return (f"a {100 * self.target:g}% detectable effect needs "
                    + (f"{need} pairs" if need else f"more than {MOST} pairs")
                    + f" on this host ({self.noise_source}); {self.budget_pairs} fit "
                    + (f"the budget of {self.budget_s / 60:g} min" if self.budget_s else "max_pairs")
                    + f", which detect {100 * can:.1f}%. Raise BUDGET (or max_pairs), set MDE to "
                    f"{100 * can:.1f}% or more, or pass --anyway")
        return None


def make_plan(profile: LoadProfile, stack: str, results: Path, aa: AAReference | None,
              profiling: bool = True) -> Plan:
    """The plan from the nearest evidence of this host's noise: the profile's latest A/A, else this stack's latest
    compare of the profile, else another stack's (each with the variance of its own pairs)."""
    comp = aa.components.get("throughput") if aa else None
    source, assumes = (f"the A/A {aa.run_id}", "bare vLLM against itself: the deployments' own variance, "
                       "which the layer can only add to") if comp is not None else ("", "")
    if comp is None:
        found = earlier_noise(profile, stack, results)
        if found is not None:
            comp, source, assumes = found
    return Plan(target=profile.target_mde, levels=len(profile.levels()), max_pairs=profile.max_pairs,
                budget_s=profile.budget_min * 60 if profile.budget_min else None,
                clock=timings(profile, stack, results), noise=comp,
                noise_source=source or "none stored under results/", noise_assumes=assumes, profiling=profiling,
                from_aa=aa is not None and aa.components.get("throughput") is not None)


def earlier_noise(profile: LoadProfile, stack: str, results: Path) -> tuple[Components, str, str] | None:
    """(throughput's components, whose, what it assumes) from the latest complete sequential compare of the profile:
    this stack's first, then any other's."""
    for kind, assumes in ((stack, f"{stack}'s deployments vary as they did then"),
                          (None, "this stack's deployments vary as that stack's did: a layer with more variance "
                                 "of its own than that one is planned short")):
        for path in sorted(results.glob(f"*compare-{kind or '*'}-*/compare.json"), reverse=True):
            try:
                s = CompareSummary.model_validate_json(path.read_text())
            except ValueError:
                continue
            comp = s.components.get("throughput")
            if (s.status == "complete" and s.profile == profile.name and s.deployments == "sequential"
                    and s.stack != "vllm" and comp is not None):
                return comp, f"the pairs of {s.stack}'s compare {s.run_id}", assumes
    return None


def check_plan(plan: Plan, anyway: bool) -> None:
    """A budget shorter than one warm pair, or a target it cannot reach, is refused unless `anyway`."""
    why = plan.refusal()
    if why and not anyway:
        raise LayerbenchError(why)
