"""Presentation only: the report of `make sweep` (reports/<run-id>/report.md + .html + sweep.png): the answer in
one sentence, the layer's delta at every value and level, a setting's effect on each side, and per shape where
the CPU went."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from harness.analysis.cost import Price, usd
from harness.reporting.document import Document, Table, write_document
from harness.reporting.format import fmt, share_pct
from harness.reporting.report_tables import cpu_rows
from harness.schemas.sweep import SweepSummary


def delta_table(s: SweepSummary, price: Price | None) -> Table:
    side = "bare vLLM" if s.kind == "setting" else "baseline"
    head = [s.key, "level", f"{side} tok/s", f"{s.stack} tok/s", "delta", "95% interval", "verdict",
            f"{side} TTFT p95 ms", f"{s.stack} TTFT p95 ms", f"{side} goodput", f"{s.stack} goodput"]
    head += [f"{s.stack} $ / M out tok"] if price else []
    rows = []
    for p in s.points:
        if not p.levels or all(lv.delta_pct is None for lv in p.levels):
            why = "; ".join(f"{k}: {v.splitlines()[0][:160]}" for k, v in p.failed.items()) or "not measured"
            rows.append([p.value, "—", "—", "—", "—", "—", f"**failed**: {why}", "—", "—", "—", "—"]
                        + (["—"] if price else []))
            continue
        for lv in p.levels:
            rows.append([p.value, lv.level_text, fmt(lv.baseline_tok_s, "{:.0f}"), fmt(lv.stack_tok_s, "{:.0f}"),
                         fmt(lv.delta_pct, "{:+.1f}%"), lv.ci.text() if lv.ci else "—", lv.verdict,
                         fmt(lv.baseline_ttft_p95_ms), fmt(lv.stack_ttft_p95_ms), share_pct(lv.baseline_goodput),
                         share_pct(lv.stack_goodput)] + ([usd(price.usd_per_mtok(lv.stack_tok_s))] if price else []))
    what = {"setting": "each value deployed on the bare engine and behind the layer",
            "option": "the layer in each shape against one bare-engine baseline",
            "shape": "each request shape (input x output tokens) sent to a bare vLLM and to the layer, both deployed "
                     "with the same engine settings"}[s.kind]
    return (f"The layer against the bare engine, by {s.key}", f"{what}; mean of {s.repeats} repeat(s); a delta is an "
            "overhead or a gain only when its 95% interval excludes 0.", head, rows)


def effect_table(s: SweepSummary) -> list[Table]:
    if not s.effects:
        return []
    a, b = s.values[0], s.values[-1]
    rows = [[e.level, f"{fmt(e.baseline.baseline_tok_s, '{:.0f}')} → {fmt(e.baseline.stack_tok_s, '{:.0f}')}",
             fmt(e.baseline.delta_pct, "{:+.1f}%"), e.baseline.verdict,
             f"{fmt(e.stack.baseline_tok_s, '{:.0f}')} → {fmt(e.stack.stack_tok_s, '{:.0f}')}" if e.stack else "—",
             fmt(e.stack.delta_pct, "{:+.1f}%") if e.stack else "—", e.stack.verdict if e.stack else "—"]
            for e in s.effects]
    return [(f"What {s.key} {a} → {b} does, on each side", "The same change measured on the bare engine and behind "
             "the layer (output tok/s); the verdict uses the same 95% interval as a compare.",
             ["level", "bare vLLM tok/s", "bare change", "verdict", f"{s.stack} tok/s", f"{s.stack} change", "verdict"],
             rows)]


def cpu_tables(s: SweepSummary) -> list[Table]:
    out = []
    for p in s.points:
        if p.levels and any(lv.delta_pct is not None for lv in p.levels):
            view = SimpleNamespace(levels=p.levels)  # cpu_rows reads only the levels' per-process cores
            host = ("" if any(lv.baseline_gpu or lv.stack_gpu for lv in p.levels) else
                    "; on a CPU host the layer's processes take their cores from the engine")
            out.append((f"Where the CPU went (cores), {s.key}={p.value}", "CPU seconds per level window, mean over "
                        f"repeats{host}.",
                        ["deployment", "process", *[lv.level_text for lv in p.levels]], cpu_rows(view)))
    return out


def heatmap(s: SweepSummary, out: Path) -> str | None:
    """A shape sweep's delta over shape (rows) and level (columns): where the layer's cost concentrates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    levels = list(dict.fromkeys(lv.level_text for p in s.points for lv in p.levels))
    grid = np.full((len(s.points), len(levels)), np.nan)
    for i, p in enumerate(s.points):
        for lv in p.levels:
            if lv.delta_pct is not None:
                grid[i, levels.index(lv.level_text)] = lv.delta_pct
    if np.isnan(grid).all():
        return None
    span = max(5.0, float(np.nanmax(np.abs(grid))))
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(levels), 1.2 + 0.6 * len(s.points)))
    im = ax.imshow(grid, cmap="RdBu", vmin=-span, vmax=span, aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, "—" if np.isnan(v) else f"{v:+.0f}%", ha="center", va="center", fontsize=9,
                color="white" if not np.isnan(v) and abs(v) > 0.6 * span else "black")  # readable on dark cells
    ax.set_xticks(range(len(levels)), levels)
    ax.set_yticks(range(len(s.points)), [p.value.replace("x", " / ") for p in s.points])
    ax.set(title=f"{s.stack} against bare vLLM: throughput delta", xlabel="level", ylabel="input / output tokens")
    fig.colorbar(im, ax=ax, label="delta %")
    fig.tight_layout()
    fig.savefig(out / "heatmap.png", dpi=110)
    plt.close(fig)
    return "heatmap.png"


def plot(s: SweepSummary, out: Path) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = False
    for p in s.points:
        for side, key, style in (("bare", "baseline_tok_s", "--"), (s.stack, "stack_tok_s", "-")):
            if s.kind == "option" and side == "bare" and p is not s.points[0]:
                continue  # one baseline for every shape
            pts = [(lv.level, getattr(lv, key)) for lv in p.levels if getattr(lv, key) is not None]
            if pts:
                label = f"{side} {s.key}={p.value}" if (s.kind != "option" or side != "bare") else "bare vLLM"
                ax.plot(*zip(*pts, strict=True), style, marker="o", label=label)
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    open_loop = any(lv.rate is not None for p in s.points for lv in p.levels)
    if not open_loop:
        ax.set_xscale("log", base=2)
    ax.set(title=f"Output throughput by {s.key}", xlabel="offered rate (req/s)" if open_loop else "concurrency",
           ylabel="tok/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "sweep.png", dpi=110)
    plt.close(fig)
    return "sweep.png"


def write(s: SweepSummary, out_dir: Path, price: Price | None, extra: list[Table] = ()) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    what = {"setting": "engine setting", "option": "layer option", "shape": "request"}[s.kind]
    bullets = [f"**{s.conclusion}**",
               f"stack {s.stack}, {what} {s.key} = "
               f"{', '.join(s.values)}; profile `{s.profile}`, {s.repeats} repeat(s); status {s.status}"
               + (f"; wall time {s.wall_s:.0f} s" if s.wall_s else "")]
    bullets += [f"**{label} failed**: {why.splitlines()[0][:300]}" for label, why in s.failures.items()]
    if price:
        bullets.append(f"cost at {price.text()}: this run {usd(price.run_usd(s.wall_s or 0.0))}")
    images = [plot(s, out_dir)] + ([heatmap(s, out_dir)] if s.kind == "shape" else [])
    tables = [delta_table(s, price), *effect_table(s), *cpu_tables(s), *extra]
    return write_document(out_dir, Document(f"layerbench sweep: {s.stack} by {s.key} — {s.run_id}", bullets, tables,
                                            [i for i in images if i]))
