"""`make report`'s chart, presentation only: every stack's throughput delta (%) against load with its 95% band,
one panel per profile, one line per latest compare (harness/reporting/summary_report.py picks them). A line is one run:
nothing is averaged across runs, and two engine versions of a stack are two lines. Where a capacity run of the
same stack, profile and engine version exists, its capacity is a dotted vertical line in that stack's colour."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel

from harness.schemas import level_text


class StackRun(BaseModel):
    """Which run of which stack a summary line stands for: a stack in one shape, profile and engine version."""

    stack: str
    shape: str | None = None
    profile: str
    engine_version: str | None = None
    run_id: str


class CapacityMark(StackRun):
    """A stack's capacity at its SLA (harness/procedures/capacity.py), as the summary marks it."""

    kind: Literal["concurrency", "rate"]
    value: float
    reached: bool = True  # False: every level held up to the search's ceiling, so capacity is at least this

    @property
    def text(self) -> str:
        at = level_text(self.value if self.kind == "rate" else int(self.value), self.kind == "rate")
        return ("≥ " if not self.reached else "") + at


def mark_for(marks: list[CapacityMark], stack: str, shape: str | None, profile: str, version: str | None,
             open_loop: bool) -> CapacityMark | None:
    """The capacity run measured on the same stack in the same shape, profile, engine version and load kind."""
    want = "rate" if open_loop else "concurrency"
    return next((m for m in marks if (m.stack, m.shape, m.profile, m.engine_version, m.kind)
                 == (stack, shape, profile, version, want) and m.value > 0), None)


def _clip(ax, deltas: list[float]) -> None:
    """Two repeats give intervals of hundreds of percent; an axis sized to them flattens every delta to a line.
    Below -100% nothing exists; above, the axis follows the deltas and a band that runs off it says so."""
    lo, hi = ax.get_ylim()
    top = max(50.0, 2.0 * max((abs(d) for d in deltas), default=0.0) + 20.0)
    if hi > top:
        ax.set_ylim(max(lo, -100.0), top)
        ax.text(0.01, 0.98, "bands run off the top", transform=ax.transAxes, fontsize=7, va="top", color="0.4")
    else:
        ax.set_ylim(max(lo, -100.0), hi)


def delta_chart(levels: pd.DataFrame, latest: pd.DataFrame, marks: list[CapacityMark], out: Path) -> Path | None:
    """levels: summary_report.level_figures; latest: summary_report.latest_compares. None when no latest compare
    has a delta to draw."""
    lines = []
    for r in latest.itertuples(index=False):
        mine = levels[(levels["run_id"] == r.run_id) & levels["delta_pct"].notna()].sort_values("level")
        if len(mine):
            lines.append((r, mine))
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator, ScalarFormatter

    profiles = sorted({r.profile for r, _ in lines})
    ncols = min(len(profiles), 2)
    nrows = math.ceil(len(profiles) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 4.2 * nrows), squeeze=False)
    for ax, profile in zip(axes.flat, profiles, strict=False):
        open_loops: set[bool] = set()
        ticks: set[float] = set()
        for r, mine in (x for x in lines if x[0].profile == profile):
            version = None if pd.isna(r.engine_version) else r.engine_version
            shape = "" if pd.isna(r.shape) else f" ({r.shape})"
            x = mine["level"].astype(float).to_numpy()
            open_loop = bool(mine["open_loop"].iloc[0])
            open_loops.add(open_loop)
            (line,) = ax.plot(x, mine["delta_pct"].astype(float), "o-",
                              label=f"{r.compared_stack}{shape} · vLLM {version or '?'} · {r.run_id[:15]}")
            y, lo, hi = (mine[c].astype(float).to_numpy() for c in ("delta_pct", "ci_lo_pct", "ci_hi_pct"))
            # a level without an interval has no band there (NaN leaves a gap), rather than a made-up one; the
            # error bars show the interval where a band cannot (a single level)
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
            yerr = [np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)]  # matplotlib refuses negative lengths
            ax.errorbar(x, y, yerr=yerr, fmt="none", ecolor=line.get_color(), alpha=0.6, capsize=3)
            ticks |= set(x)
            if m := mark_for(marks, r.compared_stack, None if pd.isna(r.shape) else r.shape, profile, version,
                             open_loop):
                ax.axvline(m.value, color=line.get_color(), ls=":", lw=1.2,
                           label=f"{r.compared_stack} capacity {m.text}")
        ax.axhline(0, color="black", lw=0.8)
        _clip(ax, [d for r, mine in lines if r.profile == profile for d in mine["delta_pct"].astype(float)])
        if open_loops == {False}:  # concurrencies double: a log2 axis spaces them evenly
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(sorted(ticks), [f"{v:g}" for v in sorted(ticks)])  # the measured levels, as measured
        xlabel = {frozenset({True}): "offered rate (req/s)", frozenset({False}): "concurrency"}.get(
            frozenset(open_loops), "level (concurrency, or req/s)")
        ax.set(title=f"profile {profile}", xlabel=xlabel, ylabel="throughput delta vs bare vLLM (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(profiles):]:
        ax.set_visible(False)
    fig.suptitle("Throughput delta with its 95% band: the latest complete compare per stack, profile and version",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
