"""What the compare report's figures share (size, fonts, colours, the level axis, saving) and its two figures
that are not one line per side: the TTFT distribution per level (empirical CDF, where a bimodal level shows as a
step) and the CPU each process used per level (stacked bars). harness/reporting/plots.py draws the rest and picks the
order.

Every figure is WIDTH_IN x DPI = 550 px wide: the HTML report shows two a row at their own size, so fonts are set
for that width rather than scaled down from a wide figure."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.reporting.format import major_processes
from harness.schemas import SIDES, LevelDelta

DPI = 110
WIDTH_IN = 5.0
HEIGHT_IN = 3.3
RC = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7,
      "ytick.labelsize": 7}
COLOR = {"baseline": "C0", "stack": "C1"}
MARKER = {"baseline": "o", "stack": "s"}
SLO_STYLE = {"color": "red", "lw": 1, "ls": "--"}
CLIENT = "load client"


@dataclass
class Canvas:
    """Opens figures and saves them into `out`, in order; a figure is closed even when drawing it fails."""

    plt: Any
    out: Path
    made: list[str] = field(default_factory=list)

    @contextmanager
    def figure(self, name: str, height: float = HEIGHT_IN, nrows: int = 1, ncols: int = 1,
               top: float = 1.0, **kw: Any) -> Iterator[tuple[Any, Any]]:
        """top: the share of the height tight_layout may use (room above for a figure-wide legend)."""
        fig, ax = self.plt.subplots(nrows, ncols, figsize=(WIDTH_IN, height), squeeze=nrows * ncols == 1, **kw)
        try:
            yield fig, ax
            fig.tight_layout(rect=(0, 0, 1, top))
            fig.savefig(self.out / name, dpi=DPI)
            self.made.append(name)
        finally:
            self.plt.close(fig)


def level_axis(ax: Any, levels: Sequence[float], open_loop: bool) -> None:
    """Offered rates on a linear axis (where latency turns up is read off it); concurrencies on log2."""
    from matplotlib.ticker import NullFormatter

    if not open_loop:
        ax.set_xscale("log", base=2)
    ax.set_xticks(list(levels), [f"{c:g}" for c in levels])
    ax.xaxis.set_minor_formatter(NullFormatter())  # log axes label minor ticks when they span < 1 decade


def dodge(x: float, side: str, levels: Sequence[float], open_loop: bool, amount: float = 0.08) -> float:
    """x moved a little left (baseline) or right (stack), so the two sides' repeat points do not overlap."""
    sign = -1 if side == "baseline" else 1
    if not open_loop:
        return x * 2 ** (sign * amount)  # log2 axis: a constant ratio looks the same at every level
    span = (max(levels) - min(levels)) if len(levels) > 1 else abs(x) or 1.0
    return x + sign * amount * 0.15 * span


def slo_line(ax: Any, value_ms: float | None, what: str, data_max: float | None, vertical: bool = False) -> None:
    """The SLO bound as a dashed line; left out (named in the legend instead) when it is so far above the data
    that drawing it would flatten every curve."""
    if value_ms is None:
        return
    label = f"SLO {what} {value_ms:g} ms"
    if data_max is not None and value_ms > 3 * data_max:
        ax.plot([], [], **SLO_STYLE, label=f"{label} (far above)")
    elif vertical:
        ax.axvline(value_ms, **SLO_STYLE, label=label)
    else:
        ax.axhline(value_ms, **SLO_STYLE, label=label)


def plain_log_ticks(axis: Any, lo: float, hi: float) -> None:
    """A log axis labelled 20, 50, 100 rather than 10^x, and no labels on minor ticks (they collide); 1-2-5 steps
    while the values span under two decades, so a narrow range still gets more than one label."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if hi < 100 * lo else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def legend(ax: Any, **kw: Any) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty legend warns
        ax.legend(**kw)


def ttft_cdf(cv: Canvas, levels: Sequence[LevelDelta], ttfts: dict[str, dict[float, list[float]]],
             names: tuple[str, str], slo_ms: float | None, name: str = "ttft_cdf.png") -> None:
    """One small panel per level with data: each side's share of requests with a TTFT at or below x. Shared
    axes, so levels compare; a log x axis when the values span more than 10x, so both modes of a bimodal
    level stay readable."""
    panels = [(lv, {side: sorted(ttfts.get(side, {}).get(lv.level) or []) for side in SIDES}) for lv in levels]
    panels = [(lv, d) for lv, d in panels if any(d.values())]
    if not panels:
        return
    ncols = 1 if len(panels) == 1 else 2 if len(panels) <= 4 else 3
    nrows = math.ceil(len(panels) / ncols)
    height = 0.9 + 1.5 * nrows
    values = [v for _, d in panels for vals in d.values() for v in vals]
    positive = [v for v in values if v > 0]
    log_x = bool(positive) and len(positive) == len(values) and max(positive) > 10 * min(positive)
    with cv.figure(name, height, nrows, ncols, top=1 - 0.35 / height, sharex=True, sharey=True) as (fig, axes):
        flat = list(np.ravel(axes))  # one panel: a single Axes
        for ax, (lv, d) in zip(flat, panels, strict=False):
            for side, label in zip(SIDES, names, strict=True):
                vals = d[side]
                if vals:
                    share = [(i + 1) / len(vals) for i in range(len(vals))]
                    ax.step(vals, share, where="post", color=COLOR[side], lw=1.2, label=label)
            if slo_ms is not None:
                ax.axvline(slo_ms, **SLO_STYLE)
            ax.set_title(f"{lv.level_text}  (n={len(d['baseline'])}/{len(d['stack'])})", fontsize=7)
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
            if log_x:
                ax.set_xscale("log")
                plain_log_ticks(ax.xaxis, min(positive), max(positive))
        for ax in flat[len(panels):]:
            ax.set_visible(False)
        handles: list[Any] = []
        labels: list[str] = []
        for ax in flat[:len(panels)]:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        if slo_ms is not None:
            handles.append(flat[0].plot([], [], **SLO_STYLE)[0])
            labels.append(f"SLO TTFT {slo_ms:g} ms")
        fig.legend(handles, labels, loc="upper center", ncol=min(3, len(labels)), frameon=False)
        fig.supxlabel("TTFT (ms)" + (", log scale" if log_x else ""), fontsize=8)
        fig.supylabel("share of requests", fontsize=8)


def cpu_bars(cv: Canvas, levels: Sequence[LevelDelta], names: tuple[str, str],
             name: str = "cpu_by_process.png") -> None:
    """Per level, the baseline's bar (B) then the stack's (S), stacked by process (cores during the measured
    window); processes under MINOR_CORES at every level on both sides are summed as 'other'; the load client on
    top, hatched: it is this host's cost of measuring, not the deployment's."""
    per = [(lv, {side: dict(getattr(lv, f"{side}_cpu_cores") or {}) for side in SIDES}) for lv in levels]
    procs: dict[str, float] = {}
    for _, d in per:
        for cores in d.values():
            for k, v in cores.items():
                procs[k] = max(procs.get(k, 0.0), v or 0.0)
    # biggest at the bottom
    major = sorted(major_processes(d[side] for _, d in per for side in SIDES), key=lambda k: -procs[k])
    client = {(i, side): getattr(lv, f"{side}_client_cores") or 0.0 for i, (lv, _) in enumerate(per) for side in SIDES}
    if not procs and not any(client.values()):
        return
    segments = [*major, *(["other"] if len(major) < len(procs) else [])]
    colors: dict[str, Any] = dict(zip(major, _process_colors(cv.plt, len(major)), strict=True))
    colors["other"] = "0.75"
    legend_rows = math.ceil((len(segments) + 1) / 2)
    with cv.figure(name, HEIGHT_IN + 0.18 * legend_rows) as (_, ax):
        width = 0.38
        for i, (_, d) in enumerate(per):
            for side, x in (("baseline", i - width / 2 - 0.01), ("stack", i + width / 2 + 0.01)):
                cores = d[side]
                bottom = 0.0
                for seg in segments:
                    v = (sum(c for k, c in cores.items() if k not in major) if seg == "other" else cores.get(seg))
                    if v:
                        ax.bar(x, v, width, bottom=bottom, color=colors[seg], edgecolor="white", lw=0.5,
                               label=seg if seg not in _labels(ax) else None)
                        bottom += v
                if c := client[(i, side)]:
                    ax.bar(x, c, width, bottom=bottom, color="white", edgecolor="0.35", hatch="///", lw=0.5,
                           label=CLIENT if CLIENT not in _labels(ax) else None)
                    bottom += c
                ax.text(x, bottom, "B" if side == "baseline" else "S", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(per)), [lv.level_text for lv, _ in per])
        ax.set_ylabel("cores")
        ax.set_title("Where the CPU went, per process")
        ax.set_xlabel(f"B = {names[0]};  S = {names[1]}", fontsize=7)
        ax.margins(y=0.12)
        ax.grid(axis="y", alpha=0.3)
        # the legend in stacking order, bottom first, the client last
        handles, labels = ax.get_legend_handles_labels()
        by_label = dict(zip(labels, handles, strict=True))
        order = [k for k in (*segments, CLIENT) if k in by_label]
        if order:
            ax.legend([by_label[k] for k in order], [_short(k) for k in order], loc="upper center",
                      bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False, fontsize=6.5)


def _short(label: str, limit: int = 38) -> str:
    """A process label that fits half the legend's width: its start (the deployment) and its end (the process)."""
    return label if len(label) <= limit else label[:12] + "…" + label[-(limit - 13):]


def _process_colors(plt: Any, n: int) -> list[Any]:
    """Distinct colours that are neither the sides' blue/orange (C0, C1) nor the grey of 'other' (C7)."""
    base = ["C2", "C3", "C4", "C5", "C6", "C8", "C9"]
    extra = [plt.get_cmap("tab20b")(i) for i in range(20)]
    return [(base + extra)[i % (len(base) + len(extra))] for i in range(n)]


def _labels(ax: Any) -> list[str]:
    return ax.get_legend_handles_labels()[1]
