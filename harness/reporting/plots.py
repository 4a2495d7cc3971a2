"""A compare report's PNG plots, presentation only (harness/reporting/report.py writes the rest), in the order a reader
needs them: the throughput delta with its 95% interval (the answer), throughput and TTFT p95 per level with every
repeat's value beside the mean (the spread), goodput in %, the throughput-vs-TTFT trade-off, where a side has
several engines their prefix-cache hit rate and load, in an open loop latency against the offered rate, then the
detail: each level's TTFT distribution and where the CPU went.

Closed-loop levels are concurrencies (log2 axis); open-loop levels are offered rates (linear axis), and their
latencies count from each request's scheduled send time. The SLO bound is drawn on latency plots when the
summary carries one. A figure with no data at all is left out rather than drawn empty."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.reporting.plots_dist import (
    COLOR,
    MARKER,
    RC,
    SIDES,
    Canvas,
    cpu_bars,
    dodge,
    legend,
    level_axis,
    plain_log_ticks,
    slo_line,
    ttft_cdf,
)
from harness.reporting.plots_trace import arrivals
from harness.schemas import CompareSummary, LevelStats

# (level, mean over repeats or None, each repeat's value): one side's points of one metric
Series = list[tuple[float, float | None, list[float]]]
GOODPUT_YLIM = (-3.0, 103.0)  # % of sent requests; a little room so points at 0 and 100 are not cut


def side_names(s: CompareSummary) -> tuple[str, str]:
    """Column names; an A/A compare has the same stack on both sides."""
    if s.is_aa:
        return f"{s.baseline_stack} (A)", f"{s.stack} (B)"
    return s.baseline_stack, s.stack


def side_labels(s: CompareSummary) -> tuple[str, str]:
    """Legend names: which side is which, with its engine version ("baseline: vllm 0.32.0", "stack: ray (vLLM
    0.32.0)"); an A/A compare stays two names (side_names)."""
    out = []
    for side, name in zip(SIDES, side_names(s), strict=True):
        ver = s.versions.get(side)
        if not ver:
            out.append(f"{side}: {name}")
        elif "vllm" in name.lower() or not ver[:1].isdigit():  # the name or the version already says which engine
            out.append(f"{side}: {name} {ver}" if "vllm" in name.lower() else f"{side}: {name} ({ver})")
        else:
            out.append(f"{side}: {name} (vLLM {ver})")
    return out[0], out[1]


def goodput_pct(share: float | None) -> float | None:
    """Goodput is stored as a share of sent requests (0-1); plots show %."""
    return None if share is None else 100.0 * share


METRICS: dict[str, tuple[str, Callable[[LevelStats], float | None]]] = {
    # metric -> (LevelDelta field after "<side>_", the same from one repeat's stats)
    "tok_s": ("tok_s", lambda st: st.judged_tok_s),
    "ttft_p95_ms": ("ttft_p95_ms", lambda st: st.ttft_ms.p95),
    "goodput": ("goodput", lambda st: st.goodput),
    "e2e_p95_ms": ("e2e_p95_ms", lambda st: st.e2e_ms.p95),
}


def series(s: CompareSummary, side: str, metric: str) -> Series:
    """One side's points of a metric per level: the summary's mean, and each complete repeat's own value (a level
    stopped mid-way is not a measurement; compare.level_deltas leaves it out of the mean too). Goodput in %."""
    field, per_repeat = METRICS[metric]
    scale = goodput_pct if metric == "goodput" else (lambda v: v)
    run = s.runs.get(side)
    reps: dict[float, list[float]] = {}
    for lv in (run.levels if run else []):
        if lv.incomplete is None and (v := per_repeat(lv.stats)) is not None:
            reps.setdefault(lv.stats.level, []).append(scale(v))  # type: ignore[arg-type]
    return [(lv.level, scale(getattr(lv, f"{side}_{field}")), reps.get(lv.level, [])) for lv in s.levels]


def gpu_series(s: CompareSummary, side: str, key: str = "util_pct_mean") -> Series:
    """One side's GPU utilisation per level (mean over its GPUs), each complete repeat beside the mean."""
    run = s.runs.get(side)
    reps: dict[float, list[float]] = {}
    for lv in (run.levels if run else []):
        vals = [v for g in lv.gpu if (v := getattr(g, key)) is not None]
        if lv.incomplete is None and vals:
            reps.setdefault(lv.stats.level, []).append(sum(vals) / len(vals))
    return [(lv.level, getattr(lv, f"{side}_gpu", {}).get(key), reps.get(lv.level, [])) for lv in s.levels]


@dataclass(frozen=True)
class LevelFigure:
    """One per-level figure: its PNG's name, title and y label, the metric it draws (a METRICS key; "" where the
    series are given), the SLO line (what it bounds, its value or None) and the y range."""

    name: str
    title: str
    ylabel: str
    metric: str = ""
    slo: tuple[str, float | None] | None = None
    ylim: tuple[float, float] | None = None


def routing_series(s: CompareSummary, side: str, key: str) -> Series:
    """One side's routing figure per level (LevelDelta.<side>_routing: hit_rate in %, imbalance, load_imbalance)."""
    out: Series = []
    for lv in s.levels:
        r = getattr(lv, f"{side}_routing", None)
        v = getattr(r, key) if r is not None else None
        out.append((lv.level, 100 * v if v is not None and key == "hit_rate" else v, []))
    return out


def _routing(cv: Canvas, s: CompareSummary, names: tuple[str, str]) -> None:
    """Where a side has several engines: each side's prefix-cache hit rate, and how unevenly its engines held
    requests, per level, beside the deltas."""
    if not any(r is not None and r.replicas > 1 for lv in s.levels for r in (lv.baseline_routing, lv.stack_routing)):
        return
    _levels(cv, s, names, LevelFigure("prefix_hits.png", "Prefix-cache hit rate (every engine's own counters)", "%",
                                      ylim=GOODPUT_YLIM), {side: routing_series(s, side, "hit_rate") for side in SIDES})
    _levels(cv, s, names, LevelFigure("engine_load.png", "Requests held per engine: the busiest over the mean",
                                      "max / mean (1: even)"),
            {side: routing_series(s, side, "load_imbalance") for side in SIDES})


def _data_max(*all_series: Series) -> float | None:
    vals = [v for ser in all_series for _, m, reps in ser for v in (m, *reps) if v is not None]
    return max(vals) if vals else None


def plots(s: CompareSummary, out: Path, ttfts: dict[str, dict[float, list[float]]] | None = None,
          lines: dict[str, list[tuple[int, int]]] | None = None) -> list[str]:
    """Writes the PNGs into `out`; returns their names in reading order. ttfts: per side ("baseline"/"stack"),
    per level, every measured request's TTFT in ms (harness.analysis.samples.ttft_samples); without it no CDF figure.
    lines: a replayed trace's requests, per side (harness.analysis.samples.timelines): the arrivals figure."""
    if not s.levels:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cv = Canvas(plt, out)
    slo = getattr(s, "slo", None)  # CompareSummary.slo is newer than some summaries on disk
    ttft_slo = slo.ttft_s * 1e3 if slo else None
    names = side_labels(s)
    with plt.rc_context(RC):
        if lines:
            arrivals(cv, lines, names)
        _delta(cv, s, names)
        _levels(cv, s, names, LevelFigure("throughput.png", "Output throughput", "tok/s", "tok_s"))
        ttft_title = "TTFT p95" + (" (from schedule)" if s.open_loop else "")
        _levels(cv, s, names, LevelFigure("ttft_p95.png", ttft_title, "ms", "ttft_p95_ms", ("TTFT", ttft_slo)))
        _levels(cv, s, names, LevelFigure("goodput.png", "Goodput (requests within the SLO)", "% of sent requests",
                                          "goodput", ylim=GOODPUT_YLIM))
        _tradeoff(cv, s, names, ttft_slo)
        _routing(cv, s, names)
        if s.open_loop:
            _latency_vs_rate(cv, s, names, ttft_slo, slo.e2e_s * 1e3 if slo else None)
        if ttfts:
            ttft_cdf(cv, s.levels, ttfts, names, ttft_slo)
        cpu_bars(cv, s.levels, names)
        _levels(cv, s, names, LevelFigure("gpu_util.png", "GPU utilisation (NVML, mean over the deployment's GPUs)",
                                          "%", ylim=GOODPUT_YLIM), {side: gpu_series(s, side) for side in SIDES})
    return cv.made


def _levels(cv: Canvas, s: CompareSummary, names: tuple[str, str], fig: LevelFigure,
            both: dict[str, Series] | None = None) -> None:
    """Each side's mean per level as a line, each repeat as a small point beside it with a bar over its range.
    both: the series, where they are not one of METRICS."""
    name, title, ylabel, slo, ylim = fig.name, fig.title, fig.ylabel, fig.slo, fig.ylim
    both = both or {side: series(s, side, fig.metric) for side in SIDES}
    if not any(m is not None or reps for ser in both.values() for _, m, reps in ser):
        return
    levels = [lv.level for lv in s.levels]
    with cv.figure(name) as (_, ax):
        for side, label in zip(SIDES, names, strict=True):
            _side(ax, side, label, both[side], levels, s.open_loop)
        if any(reps for ser in both.values() for _, _, reps in ser):
            ax.scatter([], [], s=9, color="0.5", label="one repeat")  # a legend entry for the small points
        if slo is not None:
            slo_line(ax, slo[1], slo[0], _data_max(*both.values()))
        level_axis(ax, levels, s.open_loop)
        ax.set(title=title, xlabel="offered rate (req/s)" if s.open_loop else "concurrency", ylabel=ylabel)
        if ylim:
            ax.set_ylim(*ylim)
        ax.grid(alpha=0.3)
        legend(ax)


def _side(ax: Any, side: str, label: str, ser: Series, levels: list[float], open_loop: bool) -> None:
    pts = [(x, m) for x, m, _ in ser if m is not None]
    if pts:
        ax.plot(*zip(*pts, strict=True), "-", marker=MARKER[side], color=COLOR[side], ms=4, label=label, zorder=3)
    for x, _, reps in ser:
        if not reps:
            continue
        xd = dodge(x, side, levels, open_loop)
        ax.scatter([xd] * len(reps), reps, s=9, color=COLOR[side], alpha=0.6, lw=0, zorder=2)
        if len(reps) > 1:  # the spread between repeats, at a glance
            ax.vlines(xd, min(reps), max(reps), color=COLOR[side], lw=1, alpha=0.5, zorder=2)


# the report's verdict colours (document.py's cells), strong enough to tell apart on a white plot
VERDICT_COLOR = {"overhead": "#d9534f", "gain": "#3a9d5d", "mixed": "#e0a030", "equivalent": "#9e9e9e",
                 "inconclusive": "#ffffff"}


def _delta(cv: Canvas, s: CompareSummary, names: tuple[str, str]) -> None:
    """The stack's throughput against the baseline's per level, with its 95% interval, each level's point coloured
    by its verdict; the latest A/A compare's interval around 0, where there is one, is this host's noise floor."""
    pts = [(lv.level, lv.delta_pct, lv.ci) for lv in s.levels if lv.delta_pct is not None]
    if not pts:
        return
    levels = [lv.level for lv in s.levels]
    with cv.figure("delta.png") as (_, ax):
        _aa_band(ax, s, levels)
        x, d, ci = zip(*pts, strict=True)
        # clamped at 0: with no variance the interval is the point, and rounding may put it a hair off
        err = [[max(0.0, v - i.lo_pct) if i else 0.0 for v, i in zip(d, ci, strict=True)],
               [max(0.0, i.hi_pct - v) if i else 0.0 for v, i in zip(d, ci, strict=True)]]
        ax.errorbar(x, d, yerr=err, fmt="-", color=COLOR["stack"], capsize=4, label="delta, 95% interval",
                    zorder=2)
        verdicts = {lv.level: lv.verdict for lv in s.levels}
        for verdict in dict.fromkeys(verdicts[v] for v in x):  # a point per level, its colour its verdict
            at = [(v, y) for v, y in zip(x, d, strict=True) if verdicts[v] == verdict]
            ax.scatter(*zip(*at, strict=True), s=42, marker=MARKER["stack"], color=VERDICT_COLOR.get(verdict, "0.6"),
                       edgecolors="black", linewidths=0.6, label=verdict, zorder=3)
        ax.axhline(0, color="black", lw=0.8)
        level_axis(ax, levels, s.open_loop)
        ax.set(title=f"Throughput of {names[1]}\nagainst {names[0]}",
               xlabel="offered rate (req/s)" if s.open_loop else "concurrency", ylabel="% (below 0: the layer costs)")
        ax.grid(alpha=0.3)
        legend(ax)


def _aa_band(ax: Any, s: CompareSummary, levels: list[float]) -> None:
    if s.aa is None:
        return
    band = sorted((lv, hw) for lv in levels if (hw := (s.aa.levels.get(lv) or (None, None))[1]) is not None)
    if not band:
        return
    if len(band) == 1:  # one level: a short band either side of it, so it is seen at all
        lv, hw = band[0]
        band = [(dodge(lv, side, levels, s.open_loop, 0.3), hw) for side in SIDES]
    xs, hws = zip(*band, strict=True)
    ax.fill_between(xs, [-h for h in hws], hws, color="0.5", alpha=0.2, lw=0, label=f"A/A noise ({s.aa.run_id})")


def _tradeoff(cv: Canvas, s: CompareSummary, names: tuple[str, str], ttft_slo: float | None) -> None:
    """Throughput against TTFT p95, a point per level: how much latency each side pays for its tokens/s."""
    curves = {side: [(lv, t, y) for lv in s.levels if (t := getattr(lv, f"{side}_ttft_p95_ms")) is not None
                     and (y := getattr(lv, f"{side}_tok_s")) is not None] for side in SIDES}
    if not any(curves.values()):
        return
    xs = [t for c in curves.values() for _, t, _ in c]
    with cv.figure("throughput_vs_ttft.png") as (_, ax):
        for (side, c), label in zip(curves.items(), names, strict=True):
            if not c:
                continue
            ax.plot([t for _, t, _ in c], [y for _, _, y in c], "-", marker=MARKER[side], color=COLOR[side], ms=4,
                    label=label)
            for lv, t, y in c:  # baseline's names above its points, the stack's below
                ax.annotate(lv.level_text, (t, y), textcoords="offset points", fontsize=6, color=COLOR[side],
                            xytext=(4, 4) if side == "baseline" else (4, -9))
        slo_line(ax, ttft_slo, "TTFT", max(xs), vertical=True)
        if min(xs) > 0 and max(xs) > 20 * min(xs):
            ax.set_xscale("log")
            plain_log_ticks(ax.xaxis, min(xs), max(xs))
        ax.set(title="Throughput vs TTFT p95" + (" (from schedule)" if s.open_loop else ""), xlabel="TTFT p95 (ms)",
               ylabel="tok/s")
        ax.margins(x=0.12, y=0.1)
        ax.grid(alpha=0.3)
        legend(ax)


def _latency_vs_rate(cv: Canvas, s: CompareSummary, names: tuple[str, str], ttft_slo: float | None,
                     e2e_slo: float | None) -> None:
    """TTFT p95 and E2E p95 (from schedule) of both sides against the offered rate; where a curve turns up is
    where that deployment stopped keeping up with its arrivals."""
    both = {(side, m): series(s, side, m) for side in SIDES for m in ("ttft_p95_ms", "e2e_p95_ms")}
    if not any(m is not None for ser in both.values() for _, m, _ in ser):
        return
    levels = [lv.level for lv in s.levels]
    with cv.figure("latency_vs_rate.png", 3.3, 1, 2, top=0.86) as (fig, axes):
        for ax, what, metric, bound in ((axes[0][0], "TTFT", "ttft_p95_ms", ttft_slo),
                                        (axes[0][1], "E2E", "e2e_p95_ms", e2e_slo)):
            for side, label in zip(SIDES, names, strict=True):
                pts = [(x, m) for x, m, _ in both[(side, metric)] if m is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=True), "-", marker=MARKER[side], color=COLOR[side], ms=4, label=label)
            slo_line(ax, bound, what, _data_max(both[("baseline", metric)], both[("stack", metric)]))
            level_axis(ax, levels, True)
            ax.set(title=f"{what} p95 from schedule", xlabel="offered rate (req/s)", ylabel="ms")
            ax.grid(alpha=0.3)
            # two narrow panels: the sides are named once above them, each panel's legend holds its SLO only
            slo_handles = [h for h, lab in zip(*ax.get_legend_handles_labels(), strict=True) if lab.startswith("SLO")]
            if slo_handles:
                ax.legend(handles=slo_handles, fontsize=6)
        sides = [(h, lab) for h, lab in zip(*axes[0][0].get_legend_handles_labels(), strict=True)
                 if not lab.startswith("SLO")]
        if sides:
            fig.legend(*zip(*sides, strict=True), loc="upper center", ncol=2, frameon=False)
