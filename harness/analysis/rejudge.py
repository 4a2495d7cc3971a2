"""A stored compare judged again by the current method when its windows are gone: a report folder's summary.json
keeps each level's estimates and the compare's two-way variance components per endpoint (harness.analysis.verdict
.components), not its pair differences, so each level's own variance cannot be recomputed. What the components do
give is its most: over K pairs, the sum over the levels of (K - 1) x a level's variance is the pairs' and the
residual's sums of squares together, (K - 1) ms_pair + df_res ms_res, so no level's variance exceeds that over
K - 1. Each level is judged with that bound (K - 1 degrees of freedom, pooled with the compare's A/A where it had
one, as harness.analysis.verdict.level_noise pools it), and the compare's levels x endpoints as one family
(harness.analysis.judging.WEIGHTS). The bound is exact where every other level's pairs differed by nothing (goodput
at 100% on both sides) and conservative elsewhere: what it still calls, the windows would have called; what it no
longer calls, they may have. The host's step check is not done again: it needs the windows."""

from __future__ import annotations

import math

from scipy import stats as st

from harness.analysis.deltas import combined, interval
from harness.analysis.judging import ENDPOINTS, WEIGHTS
from harness.analysis.verdict import ALPHA, Criteria, Hypothesis, decide, detectable, order_factor
from harness.schemas import CompareSummary, Components, Verdict

NOTE = ("judged again without its windows: this level's noise is the most the stored variance components allow "
        "(K - 1 degrees of freedom), so the call is conservative")


def _bound(comp: Components, host: Components | None, j: int) -> tuple[float, float]:
    """(a level's variance bound, pooled with the A/A's at the level where there is one; its degrees of freedom)."""
    df_own = float(comp.pairs - 1)
    own = ((comp.pairs - 1) * comp.ms_pair + comp.df_res * comp.ms_res) / df_own
    if host is None:
        return own, df_own
    per_level = len(host.level_var) == comp.levels
    h, df_h = (host.level_var[j], float(host.pairs - 1)) if per_level else (host.variance, host.df)
    return (df_own * own + df_h * h) / (df_own + df_h), df_own + df_h


def rejudge_stored(s: CompareSummary) -> bool:
    """Judge a compare whose windows are not stored again, in place; False (nothing changed) when its windows are
    there (the stored verdicts are the method's own) or its components do not cover its judged levels."""
    if any(run.levels for run in s.runs.values()):
        return False
    judged = [lv for lv in s.levels if lv.judged and lv.endpoints]
    comps = {ep.key: s.components.get(ep.key) for ep in ENDPOINTS}
    if not judged or any(c is None or c.levels != len(judged) or c.pairs < 2 for c in comps.values()):
        return False
    host = s.aa.components if s.aa else {}
    family = []
    for ep in ENDPOINTS:
        comp = comps[ep.key]
        assert comp is not None
        m = s.ttft_margin if ep.key == "ttft_p95" and s.ttft_margin else s.margin
        w = WEIGHTS[ep.key] / len(judged)
        for j, lv in enumerate(judged):
            old = lv.endpoints[ep.key]
            if old.estimate is None:
                continue
            var, df = _bound(comp, host.get(ep.key), j)
            signs = [s.order[i] if i < len(s.order) else 1 for i in range(comp.pairs)]  # a pair past the end: +1
            se = math.sqrt(max(var, 0.0) * order_factor(signs))
            if se <= 0:
                v = Verdict(estimate=old.estimate, lo=None, hi=None, se=None, df=df, p=None, pairs=comp.pairs,
                            note="no variance to judge by in the stored components")
            else:
                t = float(st.t.ppf(1 - ALPHA / 2, df))
                mde = detectable(se, df, ALPHA * w)
                v = Verdict(estimate=old.estimate, lo=old.estimate - t * se, hi=old.estimate + t * se, se=se, df=df,
                            p=float(2 * st.t.sf(abs(old.estimate) / se, df)), mde=mde, pairs=comp.pairs, note=NOTE)
            lv.endpoints[ep.key] = v
            family.append(Hypothesis(v, Criteria(m, ep.direction, ep.log), w))
    decide(family)
    for lv in judged:
        lv.verdict, lv.why = combined(lv.endpoints)
        lv.ci = interval(lv.endpoints.get("throughput"))
        lv.noise_pct = lv.ci.half_width_pct if lv.ci else None
    return True


def changed(before: CompareSummary, after: CompareSummary) -> list[str]:
    """'c=16: gain (goodput) -> inconclusive' for each level whose verdict changed."""
    out = []
    for a, b in zip(before.levels, after.levels, strict=True):
        if (a.verdict, a.why) != (b.verdict, b.why):
            was = a.verdict + (f" ({a.why})" if a.why else "")
            now = b.verdict + (f" ({b.why})" if b.why else "")
            out.append(f"{a.level_text}: {was} -> {now}")
    return out

