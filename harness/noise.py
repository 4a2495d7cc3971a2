"""Is a throughput delta real? A 95% confidence interval for each level's delta, stack against baseline.

The unit is one measured window: each repeat of a level gives one tok/s per deployment. The delta is the
ratio of the means; its interval is Welch's t interval on the log of that ratio (delta method: each side's
variance of the mean over its mean squared, Welch-Satterthwaite degrees of freedom), so it needs no equal
variances and stays valid for the 2-3 repeats a CPU host affords. With one repeat a side falls back on the
time blocks of its single window (optimistic: consecutive blocks of a closed loop are correlated; the
report says which source was used). A delta is an *overhead* or a *gain* only when its interval excludes 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel
from scipy import stats as st

LEVEL = 0.95


class DeltaInterval(BaseModel):
    delta_pct: float
    lo_pct: float
    hi_pct: float
    df: float | None  # None: no variance on either side (the interval is the point)
    n_baseline: int
    n_stack: int
    source: str  # "repeats" | "blocks (1 repeat)"

    @property
    def half_width_pct(self) -> float:
        return (self.hi_pct - self.lo_pct) / 2

    @property
    def verdict(self) -> str:
        if self.lo_pct > 0:
            return "gain"
        if self.hi_pct < 0:
            return "overhead"
        return "within noise"

    def text(self) -> str:
        return f"{self.lo_pct:+.1f}…{self.hi_pct:+.1f}%"


def delta_interval(baseline: Sequence[float], stack: Sequence[float], source: str = "repeats",
                   level: float = LEVEL) -> DeltaInterval | None:
    """None when a side has fewer than 2 values or a non-positive mean."""
    b, s = np.asarray(baseline, dtype=float), np.asarray(stack, dtype=float)
    if b.size < 2 or s.size < 2 or b.mean() <= 0 or s.mean() <= 0:
        return None
    vb = b.var(ddof=1) / (b.size * b.mean() ** 2)
    vs = s.var(ddof=1) / (s.size * s.mean() ** 2)
    est = math.log(s.mean() / b.mean())
    df = None
    half = 0.0
    if vb + vs > 0:
        df = (vb + vs) ** 2 / (vb ** 2 / (b.size - 1) + vs ** 2 / (s.size - 1))
        half = float(st.t.ppf(0.5 + level / 2, df)) * math.sqrt(vb + vs)
    pct = lambda x: 100.0 * (math.exp(x) - 1.0)  # noqa: E731
    return DeltaInterval(delta_pct=pct(est), lo_pct=pct(est - half), hi_pct=pct(est + half), df=df,
                         n_baseline=int(b.size), n_stack=int(s.size), source=source)
