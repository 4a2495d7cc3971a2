"""Is a layer's effect real? The verdict of one endpoint (log throughput, goodput, log TTFT p95) over a compare's
levels, from K deployment pairs measured in counterbalanced order (ABBA, BAAB, ...).

On a shared host the largest noise is the deployment itself: a deployment runs a few percent to 17% faster or
slower than the next for its whole life (where its processes land on the cores), the same at every level. So
the unit of replication is a deployment, not a window inside one. The estimate at level l is the mean over pairs
of the stack's minus the baseline's window value, balanced over the pairs' order (AB and BA pairs weighted
equally), which cancels a linear drift of the host. Its variance comes from a mixed model of the pairs'
differences d[k, l] = delta[l] + u[k] + e[k, l]: a pair effect u shared by every level of the pair (the two
deployments' own speeds) and a residual e per window. The two-way decomposition (pairs x levels) estimates
both, Satterthwaite gives the degrees of freedom, and where the host has an A/A compare of the same profile its
components are pooled in (more degrees of freedom) and its level is a floor (a compare is never credited with
less noise than this host has shown).

Verdicts, per level, with Holm's correction across the compare's levels: `overhead` / `gain` when the corrected
test rejects "no effect"; `equivalent (±m)` when the 90% interval lies inside ±m (two one-sided tests at 5%);
otherwise `inconclusive`, with the smallest effect this run could have detected (80% power at 5%)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as st

from harness.analysis import sequential
from harness.analysis.sequential import Estimates, Look
from harness.schemas import Components, Verdict

ALPHA = 0.05
POWER = 0.80
MARGIN = 0.05  # equivalence margin, a share (the profile's `equivalence_margin`)


@dataclass(frozen=True)
class Criteria:
    """What one endpoint's verdict is judged against: the equivalence margin (a share), which way is better (+1:
    larger, throughput and goodput; -1: smaller, TTFT: an `overhead` is a change in the bad direction), and whether
    the differences are log ratios (throughput, TTFT) or differences of shares (goodput)."""

    margin: float = MARGIN
    direction: int = 1
    log_scale: bool = True

    @property
    def bound(self) -> float:
        """The margin in the differences' own terms."""
        return self.margin if not self.log_scale else math.log1p(self.margin)


def components(d: np.ndarray) -> Components | None:
    """d: pair differences, pairs x levels (NaN: missing). None with fewer than 2 complete pairs."""
    d = d[~np.isnan(d).any(axis=1)] if d.ndim == 2 else d
    k, n_lv = d.shape
    if k < 2:
        return None
    pair_means = d.mean(axis=1)
    level_means = d.mean(axis=0)
    ms_pair = n_lv * float(np.var(pair_means, ddof=1))
    resid = d - pair_means[:, None] - level_means[None, :] + d.mean()
    df_res = (k - 1) * (n_lv - 1)
    ms_res = float((resid ** 2).sum() / df_res) if df_res else 0.0
    return Components(ms_pair=ms_pair, df_pair=k - 1, ms_res=ms_res, df_res=df_res, levels=n_lv, pairs=k)


def balanced_mean(d: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, float]:
    """(per-level estimate, variance factor): the mean of the AB pairs' mean and the BA pairs' mean (a linear drift
    adds the same to one and takes it from the other), or the plain mean when only one order was run.
    order: +1 (baseline first) or -1 per pair. The factor times the variance of one difference is the estimate's
    variance."""
    ab, ba = order > 0, order < 0
    if ab.any() and ba.any():
        est = (d[ab].mean(axis=0) + d[ba].mean(axis=0)) / 2
        return est, (1 / ab.sum() + 1 / ba.sum()) / 4
    return d.mean(axis=0), 1 / len(d)


def holm(p: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None)."""
    idx = [i for i, x in enumerate(p) if x is not None]
    ordered = sorted(idx, key=lambda i: p[i])
    out: list[float | None] = [None] * len(p)
    running = 0.0
    for rank, i in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p[i]))
        out[i] = running
    return out


def judge(d: np.ndarray, order: np.ndarray, host: Components | None = None, criteria: Criteria = Criteria(),
          look: Look | None = None) -> list[Verdict]:
    """Per-level verdicts of one endpoint. d: stack minus baseline per pair (rows) and level (columns), log
    values for throughput and TTFT, shares for goodput; order: +1/-1 per pair (which side ran first); host: the
    latest A/A's components (pooled in, and a floor). criteria: the margin, which way is better, and whether d
    holds log ratios. look: a sequential compare's look (harness.analysis.sequential): its boundaries replace the
    fixed design's 5% and 90%, and what an earlier look decided stays decided."""
    d = np.asarray(d, dtype=float)
    order = np.asarray(order)
    keep = ~np.isnan(d).any(axis=1)
    d, order = d[keep], order[keep]
    own = components(d) if len(d) >= 2 else None
    comp = own.pooled(host) if own is not None else host
    if not len(d) or comp is None or (comp.df <= 0 and (comp.variance > 0 or comp.df_pair + comp.df_res <= 0)):
        est = d.mean(axis=0) if len(d) else np.full(d.shape[1], np.nan)
        return [Verdict(estimate=float(e) if np.isfinite(e) else None, lo=None, hi=None, se=None, df=None, p=None,
                        pairs=len(d)) for e in est]
    var, df = comp.variance, comp.df
    if var == 0 and df <= 0:  # every pair differed by exactly the same (goodput 100% on both sides, say)
        df = float(comp.df_pair + comp.df_res)
    floored = host is not None and own is not None and host.variance > own.pooled(host).variance
    if floored:
        var = host.variance
    est, factor = balanced_mean(d, order)
    se = math.sqrt(var * factor)
    t, t_power, t90 = (float(x) for x in st.t.ppf([1 - ALPHA / 2, POWER, 1 - ALPHA], df))
    ps = 2 * st.t.sf(np.abs(est) / se, df) if se > 0 else np.where(est != 0, 0.0, 1.0)
    mde = (t + t_power) * se if look is None else sequential.detectable(se, df, look)
    out = [Verdict(estimate=float(e), lo=float(e - t * se), hi=float(e + t * se), se=se, df=df, p=float(p),
                   mde=mde, pairs=len(d), floored=floored) for e, p in zip(est, ps, strict=True)]
    bound, direction = criteria.bound, criteria.direction
    for v, ph in zip(out, holm([v.p for v in out]), strict=True):
        v.p_holm = ph
        v.verdict = _call(v, ph, t90, bound, direction)
    if look is not None:
        for v, call in zip(out, sequential.calls(Estimates(est, se, df, ps), look, bound, direction), strict=True):
            v.verdict = call
    return out


def _call(v: Verdict, p_holm: float | None, t90: float, margin: float, direction: int) -> str:
    """overhead / gain: Holm's corrected test rejects no effect; equivalent: both one-sided 5% tests reject an
    effect of the margin (the 90% interval inside it); inconclusive otherwise."""
    assert v.estimate is not None
    if p_holm is not None and p_holm < ALPHA:
        return "gain" if v.estimate * direction > 0 else "overhead"
    if v.se is not None and abs(v.estimate) + t90 * v.se < margin:
        return "equivalent"
    return "inconclusive"


def pct(x: float) -> float:
    """A log ratio as a percent change."""
    return 100.0 * (math.exp(x) - 1.0)
