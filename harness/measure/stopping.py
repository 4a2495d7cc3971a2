"""A sequential compare's looks: after each complete pair from the minimum design's last (2 pairs), every judged
level and endpoint is judged at the group-sequential boundary of that look (harness.analysis.sequential); a
decision, once made, stays. The compare stops when every judged level's three endpoints are decided, when
`max_pairs` is reached, or, from the minimum on, when the budget cannot hold the next pair as harness.measure.budget
predicts it (each side's warm start, its last sweep, no profiled windows); that last look spends what is left of
the 5%. The budget never stops the minimum: one pair gives no interval.

Every level is measured in every pair, decided or not: a deployment sweeps its levels in order, so leaving a
decided level out would change what the next level follows (its warm-up, its KV cache, the host's state), and
the mixed model's pair effect is estimated across the levels a pair measured (docs/concepts.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.analysis.judging import ENDPOINTS
from harness.analysis.sequential import Looks, fractions
from harness.measure.budget import (
    Clock,
    next_after_look,
    out_of_time,
    own_pass,
    own_pass_s,
    profile_at_stop,
    profile_first,
)
from harness.measure.planning import Plan, detectable_share, pairs_for
from harness.measure.run import Run
from harness.measure.session import Sides
from harness.results import RunWriter
from harness.schemas import CompareSummary, Decision, Stopping
from harness.schemas.compare import DeploymentTime
from harness.schemas.verdicts import LevelDelta

NAMES = {ep.key: ep.name for ep in ENDPOINTS}  # as the verdict table names them


def undecided(lv: LevelDelta) -> list[str]:
    """The level's endpoints not yet decided, as the verdict table names them."""
    return [NAMES.get(ep, ep) for ep, v in lv.endpoints.items() if v.verdict == "inconclusive"]


class SequentialStop:
    """What measure_pairs asks a sequential compare (harness.measure.pairs.measure_pairs): its look after each pair
    (taken once the pair's last deployment has measured its judged windows, before it is torn down), and where the
    profiled windows go (harness.measure.budget). settle(looks): judges the summary's runs at a look
    (harness.analysis.conclude.settle with the compare's own inputs)."""

    def __init__(self, summary: CompareSummary, plan: Plan, run: Run, settle: Callable[[Looks], None]):
        self.summary, self.plan, self.writer, self.say, self.settle = summary, plan, run.writer, run.out.say, settle
        self.state = summary.stopping = Stopping(max_pairs=plan.max_pairs, budget_s=plan.budget_s,
                                                 target_mde=plan.target, plan=plan.lines(), min_pairs=plan.min_pairs)
        self.clock = Clock(prior=plan.clock.prior if plan.clock else {}, source="")
        self.clock.deployments = self.state.deployments
        self.t0 = self.mark = time.monotonic()
        self.last: Looks | None = None
        self.profiling = run.profiling

    def used_s(self) -> float:
        return time.monotonic() - self.t0

    def known(self) -> bool:
        """Whether the clock can predict: both sides' times, from evidence or measured here."""
        try:
            self.clock.side("baseline"), self.clock.side("stack")
        except KeyError:
            return False
        return True

    def deployed(self, d: DeploymentTime) -> None:
        self.state.deployments.append(d)
        if d.profiled_s > 0:
            where = "a profiled pass of its own" if d.profile_only else f"pair {d.pair}, after its judged windows"
            self.state.profiled[d.side] = f"{where}: {d.profiled_s:.0f} s"
        self.writer.write_json("compare.json", self.summary.model_dump())

    def profiled(self, label: str) -> bool:
        return label in self.state.profiled and not self.state.profiled[label].startswith("not profiled")

    def profile_first(self, label: str, other: str, k: int) -> bool:
        if not self.profiling or self.profiled(label) or not self.known():
            return False
        return profile_first(self.clock, (label, other), k, self.state.max_pairs, self.used_s(), self.state.budget_s)

    def profile_at_stop(self, label: str) -> bool:
        if not self.profiling or self.profiled(label) or not self.known():
            return False
        if profile_at_stop(self.clock, label, self.used_s(), self.state.budget_s):
            return True
        self.state.profiled[label] = (f"not profiled: the budget ({self.state.budget_s or 0:.0f} s) held no profiled "
                                      f"windows (~{self.clock.side(label).profiled_s:.0f} s) after the last look")
        return False

    def own_pass(self, label: str) -> bool:
        """Whether the side, still unprofiled at the stop, gets a profiled pass of its own."""
        if not self.profiling or self.profiled(label) or not self.known():
            return False
        if own_pass(self.clock, label, self.used_s(), self.state.budget_s):
            self.say(f"{label}: a profiled pass of its own (~{own_pass_s(self.clock, label) / 60:.1f} min), for the "
                     "diagnosis: no pair is measured in it")
            return True
        self.state.profiled[label] = (f"not profiled: the budget held no pass of its own "
                                      f"(~{own_pass_s(self.clock, label):.0f} s) after the last look")
        return False

    def __call__(self, measured: Sides, k: int) -> bool:
        """The look after pair k, its last deployment still up; True: no further pair."""
        now = time.monotonic()
        self.state.pair_s.append(now - self.mark)
        self.mark = now
        self.summary.start_s = start_times(self.writer)
        budget = self.state.budget_s
        known = self.known()
        # the rest of this pair (its last deployment's teardown) and the next pair, each side warm where it has
        # started before; no profiled windows: they run once, and never in a pair the budget needs
        up = ("stack" if self.state.deployments[-1].side == "baseline" else "baseline") if self.state.deployments \
            else "stack"  # the pair's last deployment, not yet recorded: it is still up
        nxt = next_after_look(self.clock, up) if known else self.state.pair_s[-1]
        over = out_of_time(self.clock, up, k, now - self.t0, budget) if known else \
            k >= self.state.min_pairs and budget is not None and (now - self.t0) + nxt > budget
        final = k >= self.state.max_pairs or over
        took = self.state.pair_s[-1]
        was = self.state.predicted_s[-1] if self.state.predicted_s else None  # what the last look predicted
        self.state.predicted_s.append(nxt)
        prof = sum(d.profiled_s for d in self.state.deployments if d.pair == k)
        timing = (f"pair {k} took {took / 60:.1f} min" + (f", predicted {was / 60:.1f}" if was else "")
                  + (f" ({prof / 60:.1f} of it profiled windows, never predicted)" if prof else "")
                  + f"; {(now - self.t0) / 60:.1f} min used" + (f" of {budget / 60:g}" if budget else "")
                  + f"; the next pair would take ~{nxt / 60:.1f} min")
        if k < self.state.min_pairs and not final:
            self.say(f"[bold]after pair {k}[/]: {timing}; the minimum is {self.state.min_pairs} pairs")
            self.writer.write_json("compare.json", self.summary.model_dump())
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
        self.say(f"[bold]look after {k} pair{'s' if k > 1 else ''}[/] ({timing}): " + self.look_text(open_))
        if not open_:
            self.state.stopped = f"every judged level decided after {k} pairs"
        elif final:
            self.state.stopped = (f"the budget ({budget / 60:g} min) holds no further pair (the next would take "
                                  f"~{nxt / 60:.1f} min, {(budget - (now - self.t0)) / 60:.1f} min left) after {k} "
                                  "pairs" if over and budget is not None
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
        return [lv.level_text for lv in self.summary.levels if lv.endpoints and undecided(lv)]

    def look_text(self, open_: list[str]) -> str:
        """What this look decided, and for each open level the endpoints that hold it open: a level whose verdict is
        already made on one endpoint (Ray's TTFT p95 overhead at c=1) says so, so the look never reads 'nothing
        decided' above a table that names a verdict."""
        judged = [lv for lv in self.summary.levels if lv.endpoints]
        done = [f"{lv.level_text} {lv.verdict}" for lv in judged if not undecided(lv)]
        held = [f"{lv.level_text} ({f'{lv.verdict} so far, ' if lv.verdict != 'inconclusive' else ''}"
                f"{', '.join(undecided(lv))} undecided)" for lv in judged if undecided(lv)]
        return (("decided: " + ", ".join(done) if done else "no level fully decided yet")
                + (f"; open: {', '.join(held)}" if held else ""))

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
