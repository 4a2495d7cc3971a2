"""A sequential compare's looks: after each complete pair (from the second), every judged level and endpoint is
judged at the group-sequential boundary of that look (harness.analysis.sequential); a decision, once made, stays.
The compare stops when every judged level's three endpoints are decided, when `max_pairs` is reached, or when the
budget cannot hold another pair of the length the pairs so far took; that last look spends what is left of the 5%.

Every level is measured in every pair, decided or not: a deployment sweeps its levels in order, so leaving a
decided level out would change what the next level follows (its warm-up, its KV cache, the host's state), and
the mixed model's pair effect is estimated across the levels a pair measured (docs/concepts.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.analysis.sequential import Looks, fractions
from harness.measure.planning import Plan, detectable_share, pairs_for
from harness.measure.run import Run
from harness.measure.session import Sides
from harness.results import RunWriter
from harness.schemas import CompareSummary, Decision, Stopping


class SequentialStop:
    """The `after_pair` of harness.measure.pairs.measure_pairs for a sequential compare. settle(looks): judges the
    summary's runs at a look (harness.analysis.conclude.settle with the compare's own inputs)."""

    def __init__(self, summary: CompareSummary, plan: Plan, run: Run, settle: Callable[[Looks], None]):
        self.summary, self.plan, self.writer, self.say, self.settle = summary, plan, run.writer, run.out.say, settle
        self.state = summary.stopping = Stopping(max_pairs=plan.max_pairs, budget_s=plan.budget_s,
                                                 target_mde=plan.target, plan=plan.lines())
        self.t0 = self.mark = time.monotonic()
        self.last: Looks | None = None

    def __call__(self, measured: Sides, k: int) -> bool:
        now = time.monotonic()
        self.state.pair_s.append(now - self.mark)
        self.mark = now
        self.summary.start_s = start_times(self.writer)
        per_pair = self.state.pair_s[-1]  # the next pair starts as warm as the last (each side's first is cold)
        budget = self.state.budget_s
        out_of_time = budget is not None and (now - self.t0) + per_pair > budget
        final = k >= self.state.max_pairs or out_of_time
        if k < 2 and not final:
            return False
        self.state.looks.append(k)
        decided = {ep: {c: d.verdict for c, d in levels.items()} for ep, levels in self.state.decided.items()}
        self.last = Looks(pairs=k, fractions=fractions(self.state.looks, self.state.max_pairs, final),
                          decided=decided, target_mde=self.plan.target)
        self.settle(self.last)
        self.summary.status = "running"  # judged at this look, not finished: a later pair may still come
        self.record(k)
        if self.plan.noise is None and len(self.state.looks) == 1:
            self.replan(k)
        open_ = self.open_levels()
        self.say(f"[bold]look after {k} pair{'s' if k > 1 else ''}[/]: " + self.look_text(open_))
        if not open_:
            self.state.stopped = f"every judged level decided after {k} pairs"
        elif final:
            self.state.stopped = (f"the budget ({budget / 60:g} min) holds no further pair (the last took "
                                  f"{per_pair / 60:.1f} min) after {k} pairs" if out_of_time and budget is not None
                                  else f"max_pairs {self.state.max_pairs} reached")
        if self.state.stopped:
            self.say(f"stopped: {self.state.stopped}")
        self.writer.write_json("compare.json", self.summary.model_dump())
        return bool(self.state.stopped)

    def record(self, k: int) -> None:
        for lv in self.summary.levels:
            if not lv.endpoints:
                continue
            level = lv.rate if lv.rate is not None else float(lv.concurrency)
            for ep, v in lv.endpoints.items():
                if v.verdict != "inconclusive" and level not in self.state.decided.setdefault(ep, {}):
                    self.state.decided[ep][level] = Decision(verdict=v.verdict, pairs=k)

    def open_levels(self) -> list[str]:
        """Judged levels with an endpoint not yet decided."""
        return [f"{lv.rate:g} req/s" if lv.rate is not None else f"c={lv.concurrency}" for lv in self.summary.levels
                if lv.endpoints and any(v.verdict == "inconclusive" for v in lv.endpoints.values())]

    def look_text(self, open_: list[str]) -> str:
        judged = [lv for lv in self.summary.levels if lv.endpoints]
        done = [f"{lv.rate if lv.rate is not None else 'c=' + str(lv.concurrency)} {lv.verdict}" for lv in judged
                if not any(v.verdict == "inconclusive" for v in lv.endpoints.values())]
        return (("decided: " + ", ".join(done) if done else "nothing decided yet")
                + (f"; open: {', '.join(open_)}" if open_ else ""))

    def replan(self, k: int) -> None:
        """With no A/A stored, the plan from the compare's own first pairs' noise."""
        comp = self.summary.components.get("throughput")
        if comp is None:
            return
        need = pairs_for(comp, self.plan.target, self.plan.levels)
        can = detectable_share(comp, self.plan.budget_pairs, self.plan.levels)
        line = (f"plan from the first {k} pairs: to detect {100 * self.plan.target:g}% in throughput at every level "
                f"you need about {need or 'more than 64'} pairs; {self.plan.budget_pairs} pairs detect "
                f"{100 * can:.1f}%")
        self.state.plan.append(line)
        self.say(line)


def start_times(writer: RunWriter) -> dict[str, list[float]]:
    """Seconds each side's deployments took to answer, in the order they ran (run.json's deployments)."""
    out: dict[str, list[float]] = {}
    for key, dep in writer.meta.get("deployments", {}).items():
        if isinstance(dep, dict) and dep.get("startup_s") is not None:
            out.setdefault(key.split(" ")[0], []).append(float(dep["startup_s"]))
    return out
