"""A compare's three co-primary endpoints, judged per level with the deployment pair as the unit
(harness.analysis.verdict): output tok/s over each window's steady part and TTFT p95, both in log terms, and goodput in
points. The window is each deployment's value, never the request: slow TTFTs come in streaks (on the 2-core
host, 10-58 slow requests in a row where independence would give 3-12), so requests are not independent.

`instability`: whether the stack's windows spread far more than the baseline's at the same levels
(Brown-Forsythe: a one-way test on the absolute deviations from each level's median, pooled over levels)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as st

from harness.analysis.sequential import Looks
from harness.analysis.verdict import MARGIN, Criteria, components, judge
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
    index; a pair past the end counts +1), the host's latest A/A variance components per endpoint (pooled in, and a
    floor), the equivalence margin (a share) and TTFT p95's own where it has one, and a sequential compare's look
    (its boundaries, and what earlier looks decided)."""

    order: Sequence[int] = ()
    host: Mapping[str, Components] = field(default_factory=dict)
    margin: float = MARGIN
    ttft_margin: float | None = None
    looks: Looks | None = None


def judge_endpoints(base: RunSummary | None, stack: RunSummary | None, levels: Sequence[float],
                    design: Design) -> tuple[dict[str, list[Verdict]], dict[str, Components]]:
    """Per endpoint, one Verdict per level (levels: those that get a verdict), and this compare's own variance
    components (what a later compare floors at, when this is an A/A)."""
    order, host, looks = design.order, design.host, design.looks
    verdicts: dict[str, list[Verdict]] = {}
    own: dict[str, Components] = {}
    for ep in ENDPOINTS:
        m = design.ttft_margin if ep.key == "ttft_p95" and design.ttft_margin else design.margin
        if not levels:
            verdicts[ep.key] = []
            continue
        d, pairs = differences(base, stack, levels, ep)
        signs = np.array([order[k] if k < len(order) else 1 for k in pairs])
        out: list[Verdict | None] = [None] * len(levels)
        # levels measured by the same pairs are judged together (a side that died at its top level in one pair
        # leaves that level to the pairs that measured it, and the other levels to all of them)
        groups: dict[tuple[int, ...], list[int]] = {}
        for j in range(len(levels)):
            groups.setdefault(tuple(np.flatnonzero(~np.isnan(d[:, j]))), []).append(j)
        for rows, cols in groups.items():
            sub = d[np.ix_(list(rows), cols)] if rows else np.empty((0, len(cols)))
            look = looks.endpoint(ep.key, [levels[j] for j in cols], ep.log, m) if looks else None
            res = [resolution(base, stack, levels[j]) for j in cols] if not ep.log else None
            for j, v in zip(cols, judge(sub, signs[list(rows)], host.get(ep.key), Criteria(m, ep.direction, ep.log),
                                        look, res), strict=True):
                out[j] = v
            if len(cols) == len(levels) and (c := components(sub)) is not None:
                own[ep.key] = c
        verdicts[ep.key] = [v for v in out if v is not None]
    return verdicts, own


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
