"""Is a layer's effect real? The verdict of one endpoint (log throughput, goodput, log TTFT p95) over a compare's
levels, from K deployment pairs measured in counterbalanced order (ABBA, BAAB, ...).

On a shared host the largest noise is the deployment itself: a deployment runs a few percent to 17% faster or
slower than the next for its whole life (where its processes land on the cores), the same at every level. So
the unit of replication is a deployment, not a window inside one. The estimate at level l is the mean over pairs
of the stack's minus the baseline's window value, balanced over the pairs' order (AB and BA pairs weighted
equally), which cancels a linear drift of the host. Its variance is the level's own: the variance over the pairs
of that level's differences d[k, l] (the pair effect shared by a pair's levels and the level's own window noise,
K - 1 degrees of freedom), pooled with the host's A/A at the same level where one is stored (more degrees of
freedom). The A/A is pooled in, not a floor: a level's A/A variance has only its pairs - 1 degrees of freedom, and
the larger of two such estimates overstates the noise (sequential A/As run to the end covered 97.2% where they
claim 95%, tests/analysis/test_verdict_sequential_mc.py); an A/A pools only into a compare of the same system
(harness.procedures.compare.noise_key), so both estimate one variance. One residual
pooled over the levels, as this module did before, lent the quiet levels' certainty to the noisy one: in A/A
compares whose window noise was 0.5%, 2% and 8% at three levels, the noisy level's 95% interval covered 82% of the
time and it was called 10% of the time; goodput at 100% on both sides at two levels made the third's false calls
15% (tests/analysis/test_verdict_levels_mc.py holds the per-level figures). The two-way decomposition (pairs x
levels, `components`) still sizes the plan and is what an A/A stores, with each level's variance beside it.

Verdicts, per level, with Holm's correction over one family (one endpoint's levels here; a compare's levels x its
endpoints in harness.analysis.judging): `overhead` / `gain` when the corrected test rejects "no effect";
`equivalent (±m)` when the 90% interval lies inside ±m (two one-sided tests at 5%); otherwise `inconclusive`, with
the smallest effect this run could have detected (80% power at the hypothesis' share of the 5%, at Holm's
strictest step)."""

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
    return Components(ms_pair=ms_pair, df_pair=k - 1, ms_res=ms_res, df_res=df_res, levels=n_lv, pairs=k,
                      level_var=[float(x) for x in np.var(d, axis=0, ddof=1)])


def balanced_mean(d: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, float]:
    """(per-level estimate, variance factor): the mean of the AB pairs' mean and the BA pairs' mean (a linear drift
    adds the same to one and takes it from the other), or the plain mean when only one order was run.
    order: +1 (baseline first) or -1 per pair. The factor times the variance of one difference is the estimate's
    variance."""
    ab, ba = order > 0, order < 0
    if ab.any() and ba.any():
        return (d[ab].mean(axis=0) + d[ba].mean(axis=0)) / 2, order_factor(order)
    return d.mean(axis=0), order_factor(order)


def order_factor(order: Sequence[int] | np.ndarray) -> float:
    """The balanced estimate's variance over one pair difference's, for pairs run in this order (+1/-1 each)."""
    ab, ba = sum(o > 0 for o in order), sum(o < 0 for o in order)
    return (1 / ab + 1 / ba) / 4 if ab and ba else 1 / len(order)


def detectable(se: float, df: float, alpha: float = ALPHA) -> float:
    """The fixed design's smallest effect found with 80% power at two-sided `alpha`: (t + t at 80%) x se."""
    return (float(st.t.isf(alpha / 2, df)) + float(st.t.ppf(POWER, df))) * se


def holm(p: Sequence[float | None], weights: Sequence[float] | None = None) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None), weighted where weights are given (Holm 1979: hypothesis
    i is tested at alpha x w_i / the weight of those not yet rejected, in the order of p_i / w_i)."""
    w = [1.0] * len(p) if weights is None else list(weights)
    idx = [i for i, x in enumerate(p) if x is not None]
    ordered = sorted(idx, key=lambda i: p[i] / w[i])
    out: list[float | None] = [None] * len(p)
    left = sum(w[i] for i in idx)
    running = 0.0
    for i in ordered:
        running = max(running, min(1.0, left / w[i] * p[i]))
        out[i] = running
        left -= w[i]
    return out


@dataclass(frozen=True)
class LevelNoise:
    """One level's variance of one pair's difference, its degrees of freedom, and where it came from when not from
    the pairs and the A/A (None: no variance to judge by, and why in `note`)."""

    var: float | None
    df: float
    note: str | None = None


ZERO = 1e-18  # a variance below this is none: every pair differed by the same (goodput 100% on both sides)


def level_noise(d: np.ndarray, host: Components | None = None,
                resolution: Sequence[float | None] | None = None) -> list[LevelNoise]:
    """Each level's own noise: the variance over the pairs of its differences (pairs - 1 degrees of freedom), pooled
    with the A/A's at the same level (its own per level where stored, else its variance over levels), weighted by
    their degrees of freedom. A level's noise is its own: pooling one residual over levels gave the one level whose
    goodput varied, beside two at 100% on both sides, an interval 6.9x too narrow at 2 pairs x 3 levels. A level whose
    pairs all differed by exactly the same gets no certainty from it: its variance is floored at the measurement's
    resolution where the endpoint has one (goodput: one request of a window's n, a uniform rounding of 1/n on each
    side, so (1/n)^2 / 6 for a difference), and else it has none."""
    k, n_lv = d.shape
    per_level = host is not None and len(host.level_var) == n_lv
    out = []
    for j in range(n_lv):
        own, df_own = (float(np.var(d[:, j], ddof=1)), float(k - 1)) if k >= 2 else (0.0, 0.0)
        h, df_h = ((host.level_var[j], float(host.pairs - 1)) if per_level else (host.variance, host.df)) \
            if host is not None else (0.0, 0.0)
        df = df_own + df_h
        if df <= 0:
            out.append(LevelNoise(None, 0.0,
                                  note="fewer than 2 deployment pairs and no A/A of this profile on this host"))
            continue
        var = (df_own * own + df_h * h) / df
        note = None
        if var < ZERO:
            r = resolution[j] if resolution is not None else None
            if not r:
                out.append(LevelNoise(None, df, note="every pair differed by exactly the same and no A/A shows this "
                                                     "host's noise: no variance to judge by"))
                continue
            var = r * r / 6
            note = (f"every pair differed by exactly the same: its variance is floored at the window's resolution "
                    f"(one request in {round(1 / r)})")
        out.append(LevelNoise(var, df, note))
    return out


def estimate(d: np.ndarray, order: np.ndarray, host: Components | None = None, look: Look | None = None,
             resolution: Sequence[float | None] | None = None, alpha: float = ALPHA) -> list[Verdict]:
    """Per-level estimates of one endpoint, not yet called (verdict `inconclusive`, no p_holm): the estimate, its
    interval, p-value and the smallest effect the run could detect at `alpha` (the hypothesis' own share of the
    family's error budget, at Holm's strictest step). d: stack minus baseline per pair (rows) and level (columns),
    log values for throughput and TTFT, shares for goodput; order: +1/-1 per pair (which side ran first); host: the
    latest A/A's components (pooled in level by level); look: a sequential compare's look (its boundary sizes the
    detectable effect); resolution: per level, the smallest step the endpoint's window value takes (goodput:
    1 / requests), the floor of a zero variance."""
    d = np.asarray(d, dtype=float)
    order = np.asarray(order)
    keep = ~np.isnan(d).any(axis=1)
    d, order = d[keep], order[keep]
    noise = level_noise(d, host, resolution)
    if len(d):
        est, factor = balanced_mean(d, order)
    else:
        est, factor = np.full(d.shape[1], np.nan), 1.0
    out = []
    for e, n in zip(est, noise, strict=True):
        if n.var is None or not np.isfinite(e):
            out.append(Verdict(estimate=float(e) if np.isfinite(e) else None, lo=None, hi=None, se=None,
                               df=n.df or None, p=None, pairs=len(d), note=n.note))
            continue
        se = math.sqrt(n.var * factor)
        t = float(st.t.ppf(1 - ALPHA / 2, n.df))
        mde = detectable(se, n.df, alpha) if look is None else sequential.detectable(se, n.df, look, alpha)
        out.append(Verdict(estimate=float(e), lo=float(e - t * se), hi=float(e + t * se), se=se, df=n.df,
                           p=float(2 * st.t.sf(abs(e) / se, n.df)), mde=mde, pairs=len(d), note=n.note))
    return out


@dataclass(frozen=True)
class Hypothesis:
    """One test of a family: its estimate (a Verdict from `estimate`, called in place), the criteria it is judged
    against, its share of the family's alpha, what an earlier look decided and, before a sequential compare's last
    look, the effect it must be able to detect before it is called equivalent."""

    verdict: Verdict
    criteria: Criteria
    weight: float = 1.0
    earlier: str | None = None
    target: float | None = None


def decide(family: Sequence[Hypothesis], look: Look | None = None, alpha: float = ALPHA) -> None:
    """Call every hypothesis of one family with one error budget: Holm's step-down, weighted by each one's share,
    over all of them (an A/A compare then calls any of them falsely at most alpha of the time, whatever their
    correlation); at a sequential look, the same at its group-sequential boundaries (harness.analysis.sequential)."""
    vs = [h.verdict for h in family]
    for v, ph in zip(vs, holm([v.p for v in vs], [h.weight for h in family]), strict=True):
        v.p_holm = ph
        v.verdict = "inconclusive"
    if look is None:
        for h, v in zip(family, vs, strict=True):
            if v.p is not None:
                v.verdict = _call(v, v.p_holm, h.criteria.bound, h.criteria.direction, alpha)
        return
    nan = math.nan
    got = [v.se is not None for v in vs]
    e = Estimates(est=np.array([v.estimate if ok else nan for v, ok in zip(vs, got, strict=True)], dtype=float),
                  se=np.array([v.se if ok else nan for v, ok in zip(vs, got, strict=True)], dtype=float),
                  df=np.array([v.df if ok else nan for v, ok in zip(vs, got, strict=True)], dtype=float),
                  p=np.array([v.p if v.p is not None else nan for v in vs], dtype=float),
                  margin=np.array([h.criteria.bound for h in family]),
                  direction=np.array([h.criteria.direction for h in family]),
                  weight=np.array([h.weight for h in family], dtype=float),
                  earlier=tuple(h.earlier for h in family),
                  target=np.array([nan if h.target is None else h.target for h in family], dtype=float))
    for v, call in zip(vs, sequential.calls(e, look, alpha), strict=True):
        v.verdict = call


def judge(d: np.ndarray, order: np.ndarray, host: Components | None = None, criteria: Criteria = Criteria(),
          look: Look | None = None, resolution: Sequence[float | None] | None = None) -> list[Verdict]:
    """Per-level verdicts of one endpoint alone, its levels one Holm family (a compare judges its levels x endpoints
    as one: harness.analysis.judging). look: a sequential compare's look: its boundaries replace the fixed design's
    5% and 90%, what an earlier look decided stays decided, and its target holds equivalence back."""
    n = np.asarray(d).shape[1] if np.asarray(d).ndim == 2 else 0
    out = estimate(d, order, host, look, resolution, ALPHA / max(1, n))
    earlier = look.earlier if look is not None else ()
    decide([Hypothesis(v, criteria, 1.0, earlier[j] if j < len(earlier) else None,
                       look.target if look is not None else None) for j, v in enumerate(out)], look)
    return out


def _call(v: Verdict, p_holm: float | None, margin: float, direction: int, alpha: float = ALPHA) -> str:
    """overhead / gain: Holm's corrected test rejects no effect; equivalent: both one-sided 5% tests reject an
    effect of the margin (the 90% interval inside it); inconclusive otherwise."""
    assert v.estimate is not None
    if p_holm is not None and p_holm < alpha:
        return "gain" if v.estimate * direction > 0 else "overhead"
    if v.se is not None and v.df and abs(v.estimate) + float(st.t.ppf(1 - ALPHA, v.df)) * v.se < margin:
        return "equivalent"
    return "inconclusive"


def pct(x: float) -> float:
    """A log ratio as a percent change."""
    return 100.0 * (math.exp(x) - 1.0)
