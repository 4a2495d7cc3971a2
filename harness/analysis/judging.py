"""A compare's three co-primary endpoints, judged per level with the deployment pair as the unit
(harness.analysis.verdict), every level and endpoint one family with one error budget (WEIGHTS): output tok/s over
each window's steady part and TTFT p95, both in log terms, and goodput in points. The window is each deployment's
value, never the request: slow TTFTs come in streaks (on the 2-core host, 10-58 slow requests in a row where
independence would give 3-12), so requests are not independent.

`instability`: whether the stack's windows spread far more than the baseline's at the same levels
(Brown-Forsythe: a one-way test on the absolute deviations from each level's median, pooled over levels)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as st

from harness.analysis.sequential import Looks
from harness.analysis.verdict import ALPHA, MARGIN, Criteria, Hypothesis, components, decide, estimate
from harness.schemas import Components, Instability, LevelSummary, RunSummary, Verdict

UNSTABLE_RATIO = 2.0  # the stack's spread must be at least this multiple of the baseline's, and significant


@dataclass(frozen=True)
class Endpoint:
    key: str
    name: str
    log: bool  # judged as a log ratio (throughput, TTFT); else as a difference of shares (goodput)
    direction: int  # +1: larger is better
    value: Callable[[LevelSummary], float | None]

    def transform(self, x: float | None) -> float:
        if x is None or (self.log and x <= 0):
            return math.nan
        return math.log(x) if self.log else x


ENDPOINTS = (
    Endpoint("throughput", "throughput", True, +1, lambda lv: lv.stats.judged_tok_s),
    Endpoint("goodput", "goodput", False, +1, lambda lv: lv.stats.goodput),
    Endpoint("ttft_p95", "TTFT p95", True, -1, lambda lv: lv.stats.ttft_ms.p95),
)


def per_pair(run: RunSummary | None, level: float, ep: Endpoint) -> dict[int, float]:
    """pair -> the deployment's value at the level: the mean over its complete windows (of logs, for a log
    endpoint)."""
    acc: dict[int, list[float]] = {}
    for lv in (run.levels if run else []):
        if lv.incomplete is None and lv.stats.level == level:
            acc.setdefault(lv.pair, []).append(ep.transform(ep.value(lv)))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def resolution(base: RunSummary | None, stack: RunSummary | None, level: float) -> float | None:
    """A share's smallest step at the level: one request of the smallest complete window's."""
    sent = [lv.stats.sent for run in (base, stack) if run for lv in run.levels
            if lv.incomplete is None and lv.stats.level == level and lv.stats.sent]
    return 1 / min(sent) if sent else None


def differences(base: RunSummary | None, stack: RunSummary | None, levels: Sequence[float],
                ep: Endpoint) -> tuple[np.ndarray, list[int]]:
    """(stack minus baseline, pairs x levels, NaN where a side did not measure; the pairs' indices)."""
    b = [per_pair(base, c, ep) for c in levels]
    s = [per_pair(stack, c, ep) for c in levels]
    pairs = sorted({k for d in b + s for k in d})
    d = np.array([[s[j].get(k, math.nan) - b[j].get(k, math.nan) for j in range(len(levels))] for k in pairs],
                 dtype=float).reshape(len(pairs), len(levels))
    return d, pairs


@dataclass(frozen=True)
class Design:
    """How a compare's levels are judged: which side each pair ran first (+1: the baseline, -1: the stack, per pair
    index; a pair past the end counts +1), the host's latest A/A variance components per endpoint (pooled in level by
    level), the equivalence margin (a share) and TTFT p95's own where it has one, and a sequential compare's look
    (its boundaries, and what earlier looks decided)."""

    order: Sequence[int] = ()
    host: Mapping[str, Components] = field(default_factory=dict)
    margin: float = MARGIN
    ttft_margin: float | None = None
    looks: Looks | None = None


# Each endpoint's share of a compare's one error budget (5%), split evenly over its judged levels. Throughput is
# the endpoint the compare is sized for (the profile's target_mde, harness.measure.planning), so it keeps most of
# the budget; a goodput collapse or a TTFT blow-up behind a layer is large (goodput 100% -> 18%, TTFT p95 x2.9 in
# the committed examples), and a fifth of the budget still finds it.
WEIGHTS = {"throughput": 0.6, "goodput": 0.2, "ttft_p95": 0.2}


@dataclass(frozen=True)
class Part:
    """One endpoint's pair differences at levels measured by the same pairs (pairs x levels), which side each pair
    ran first, and goodput's resolution per level (None for a log endpoint)."""

    ep: Endpoint
    d: np.ndarray
    signs: np.ndarray
    levels: Sequence[float]
    res: Sequence[float | None] | None = None


def _hypotheses(part: Part, n_levels: int, design: Design) -> list[Hypothesis]:
    """One part's tests, not yet called; n_levels: the compare's judged levels, over which the endpoint's share of
    the budget is split."""
    ep, d, signs, levels, res = part.ep, part.d, part.signs, part.levels, part.res
    m = design.ttft_margin if ep.key == "ttft_p95" and design.ttft_margin else design.margin
    w = WEIGHTS[ep.key] / n_levels
    look = design.looks.endpoint(ep.key, list(levels), ep.log, m) if design.looks else None
    vs = estimate(d, signs, design.host.get(ep.key), look, res, ALPHA * w)
    criteria = Criteria(m, ep.direction, ep.log)
    earlier = look.earlier if look is not None else ()
    return [Hypothesis(v, criteria, w, earlier[j] if j < len(earlier) else None, look.target if look else None)
            for j, v in enumerate(vs)]


def judge_differences(ds: Mapping[str, np.ndarray], signs: np.ndarray, levels: Sequence[float],
                      design: Design, resolution: Sequence[float | None] | None = None) -> dict[str, list[Verdict]]:
    """The compare's verdicts from its pair differences (endpoint -> pairs x levels, every pair at every level), its
    levels x endpoints one family: judge_endpoints without the summaries."""
    family = {ep.key: _hypotheses(Part(ep, ds[ep.key], signs, levels, None if ep.log else resolution), len(levels),
                                  design) for ep in ENDPOINTS if ep.key in ds}
    decide([h for hs in family.values() for h in hs], design.looks.look() if design.looks else None)
    return {k: [h.verdict for h in hs] for k, hs in family.items()}


def judge_endpoints(base: RunSummary | None, stack: RunSummary | None, levels: Sequence[float],
                    design: Design) -> tuple[dict[str, list[Verdict]], dict[str, Components]]:
    """Per endpoint, one Verdict per level (levels: those that get a verdict), the compare's levels x endpoints
    judged as one Holm family (WEIGHTS); and this compare's own variance components (what a later compare pools
    in, when this is an A/A)."""
    order = design.order
    found: dict[str, list[Hypothesis | None]] = {}
    own: dict[str, Components] = {}
    for ep in ENDPOINTS:
        out: list[Hypothesis | None] = [None] * len(levels)
        found[ep.key] = out
        if not levels:
            continue
        d, pairs = differences(base, stack, levels, ep)
        signs = np.array([order[k] if k < len(order) else 1 for k in pairs])
        # levels measured by the same pairs are judged together (a side that died at its top level in one pair
        # leaves that level to the pairs that measured it, and the other levels to all of them)
        groups: dict[tuple[int, ...], list[int]] = {}
        for j in range(len(levels)):
            groups.setdefault(tuple(np.flatnonzero(~np.isnan(d[:, j]))), []).append(j)
        for rows, cols in groups.items():
            sub = d[np.ix_(list(rows), cols)] if rows else np.empty((0, len(cols)))
            res = [resolution(base, stack, levels[j]) for j in cols] if not ep.log else None
            part = Part(ep, sub, signs[list(rows)], [levels[j] for j in cols], res)
            for j, h in zip(cols, _hypotheses(part, len(levels), design), strict=True):
                out[j] = h
            if len(cols) == len(levels) and (c := components(sub)) is not None:
                own[ep.key] = c
    decide([h for hs in found.values() for h in hs if h is not None], design.looks.look() if design.looks else None)
    return {k: [h.verdict for h in hs if h is not None] for k, hs in found.items()}, own


def _deviations(run: RunSummary | None, levels: Sequence[float]) -> tuple[list[float], list[float]]:
    """(|x - level median|, x - level mean) of a side's log tok/s windows, pooled over levels."""
    absdev, dev = [], []
    for c in levels:
        x = np.array([math.log(v) for lv in (run.levels if run else []) if lv.incomplete is None
                      and lv.stats.level == c and (v := lv.stats.judged_tok_s) > 0])
        if x.size >= 2:
            absdev += list(np.abs(x - np.median(x)))
            dev += list(x - x.mean())
    return absdev, dev


def instability(base: RunSummary | None, stack: RunSummary | None, levels: Sequence[float]) -> Instability | None:
    ab, db = _deviations(base, levels)
    as_, ds = _deviations(stack, levels)
    if len(ab) < 3 or len(as_) < 3:
        return None
    p = float(st.f_oneway(ab, as_).pvalue) if np.var(ab + as_) > 0 else 1.0
    sb, ss = (100 * float(np.sqrt(np.mean(np.square(d)))) for d in (db, ds))
    return Instability(baseline_spread_pct=sb, stack_spread_pct=ss, p=p,
                       unstable=p < 0.05 and ss > UNSTABLE_RATIO * max(sb, 1e-9))
