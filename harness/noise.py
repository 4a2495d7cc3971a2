"""A level's throughput delta with its 95% interval, as the report, the CSV and the plots show it (percent). The
interval itself comes from harness.verdict: a mixed model over a compare's deployment pairs."""

from __future__ import annotations

from pydantic import BaseModel


class DeltaInterval(BaseModel):
    delta_pct: float
    lo_pct: float
    hi_pct: float
    df: float | None  # the interval's degrees of freedom (Satterthwaite)
    n_baseline: int  # deployments of each side behind it
    n_stack: int
    source: str  # e.g. "4 deployment pairs", ", floored at this host's A/A"

    @property
    def half_width_pct(self) -> float:
        return (self.hi_pct - self.lo_pct) / 2

    def text(self) -> str:
        return f"{self.lo_pct:+.1f}…{self.hi_pct:+.1f}%"
