"""Presentation only: the capacity report (reports/<run-id>/report.md + .html + capacity.png) from a
CapacitySummary: the capacity in one sentence per side, how it broke, the 429-threshold candidates, every probe
of the search, and what serving at capacity costs when a GPU price is given."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.cost import Price, usd
from harness.reporting.document import Document, Table, write_document
from harness.reporting.format import fmt
from harness.schemas import CapacityResult, CapacitySummary


def _at(r: CapacityResult, v: float | None) -> str:
    if v is None:
        return "—"
    return f"c={v:g}" if r.kind == "concurrency" else f"{v:g} req/s"


def conclusion(r: CapacityResult, who: str) -> list[str]:
    """The capacity, how it broke and the 429-threshold candidates, as report bullets."""
    if not r.probes:
        return [f"{who}: nothing was measured"]
    lines = [f"**{who}**: {r.message}", *[f"**{who}, fragile**: {w}" for w in r.warnings]]
    if r.how_text:
        lines.append(f"{who}, how it broke: {r.how_text}")
    if r.value > 0:
        waiting = fmt(r.waiting_before_break, "{:.0f}")
        kv = "—" if r.kv_usage_before_break is None else f"{100 * r.kv_usage_before_break:.1f}%"
        lines.append(f"{who}, at {_at(r, r.value)} (the last level that held): up to {waiting} requests waiting "
                     f"and KV-cache usage up to {kv} in the engine's own metrics — the candidates for a gateway's "
                     "429 threshold" + ("" if r.waiting_before_break is not None else
                                        " (not visible: the engine's metrics were not scraped during the window)"))
    return lines


def probe_table(r: CapacityResult, who: str, price: Price | None) -> Table:
    head = ["level", "search", "TTFT p95 ms", "ITL p95 ms", "out tok/s", "goodput", "errors", "waiting max",
            "running max", "KV usage max", "held?"] + (["$ / M out tok"] if price else [])
    rows = []
    for p in sorted(r.probes, key=lambda p: p.level):
        rows.append([_at(r, p.level), p.phase, fmt(p.ttft_p95_ms), fmt(p.itl_p95_ms, "{:.2f}"), fmt(p.tok_s, "{:.0f}"),
                     f"{100 * p.goodput:.0f}%", f"{100 * p.error_share:.0f}%", fmt(p.waiting_max, "{:.0f}"),
                     fmt(p.running_max, "{:.0f}"),
                     "—" if p.kv_cache_usage_max is None else f"{100 * p.kv_cache_usage_max:.1f}%",
                     "yes" if p.held else "**no**: " + "; ".join(p.why)]
                    + ([usd(price.usd_per_mtok(p.tok_s))] if price else []))
    return (f"Search: {who}", f"Every level measured, in order of load; SLA: {r.sla.text()}. Waiting, running and "
            "KV usage are the peaks of the engine's own gauges during the level.", head, rows)


def plot(s: CapacitySummary, out: Path) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    sides = [(who, r) for who, r in ((f"baseline {s.baseline.stack}" if s.baseline else "", s.baseline),
                                     (s.stack, s.capacity)) if r and r.probes]
    if not sides:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    kind = sides[0][1].kind
    for ax, key, bound, title in ((axes[0], "ttft_p95_ms", s.sla.ttft_p95_s, "TTFT p95"),
                                  (axes[1], "itl_p95_ms", s.sla.itl_p95_s, "ITL p95")):
        for (who, r), style in zip(sides, ("o-", "s-"), strict=False):
            pts = sorted((p.level, getattr(p, key)) for p in r.probes if getattr(p, key) is not None)
            if pts:
                ax.plot(*zip(*pts, strict=True), style, label=f"{who} (capacity {_at(r, r.value)})")
            if r.value > 0:
                ax.axvline(r.value, ls=":", color=ax.lines[-1].get_color() if ax.lines else "grey", lw=1)
        if bound:
            ax.axhline(bound * 1e3, color="red", lw=1, ls="--", label=f"SLA {bound * 1e3:g} ms")
        if kind == "concurrency":
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(ScalarFormatter())  # 1, 2, 4 rather than 2^0, 2^1, 2^2
        ax.set(title=title, xlabel="concurrency" if kind == "concurrency" else "offered rate (req/s)", ylabel="ms")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "capacity.png", dpi=110)
    plt.close(fig)
    return "capacity.png"


def write(s: CapacitySummary, out_dir: Path, price: Price | None, extra: list[Table] = ()) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    bullets: list[str] = []
    sides = [(s.stack, s.capacity), *([(f"baseline ({s.baseline.stack})", s.baseline)] if s.baseline else [])]
    for who, r in sides:
        if r is not None:
            bullets += conclusion(r, who)
    if s.lost_to_layer_pct is not None and s.capacity and s.baseline:
        bullets.insert(0, f"**capacity lost to the layer: {s.lost_to_layer_pct:.0f}%** ({s.stack} holds "
                       f"{_at(s.capacity, s.capacity.value)}, the bare engine {_at(s.baseline, s.baseline.value)}, "
                       f"at {s.sla.text()})")
    elif s.baseline and s.capacity and not s.baseline.reached:
        bullets.insert(0, "the baseline held every level up to the search's ceiling, so the capacity lost to the "
                       "layer is not one number here: raise --max-level")
    how = {"interval": "polled during each measured window, so the scrapes' own cost is in the latencies",
           "none": "not scraped, so the engine's gauges are not known"}.get(s.scrape_policy, "")
    if s.gauges_polled_apart:
        how = ("read only at the edges of each measured window, so the latencies judged against the SLA carry no "
               "scrape; the engine's gauges come from a second, unmeasured pass at the same level right after it, "
               "polled during its window")
    bullets.append(f"profile `{s.profile}`; SLA {s.sla.text()}; the engine's metrics were {how}")
    if s.versions:
        bullets.append("vLLM " + ", ".join(f"{k} {v}" for k, v in s.versions.items()))
    if price:
        at_cap = [f"{who} {usd(price.usd_per_mtok(r.tok_s_at_capacity))} per million output tokens at capacity"
                  for who, r in sides if r and r.tok_s_at_capacity]
        bullets.append(f"cost at {price.text()}: this run {usd(price.run_usd(s.wall_s or 0.0))}"
                       + (f"; {'; '.join(at_cap)}" if at_cap else ""))
    for label, why in s.failures.items():
        bullets.append(f"**{label} failed**: {why.splitlines()[0]}")
    if s.wall_s:
        bullets.append(f"status {s.status}; wall time {s.wall_s:.0f} s")
    tables = [probe_table(r, who, price) for who, r in sides if r and r.probes] + list(extra)
    image = plot(s, out_dir)
    return write_document(out_dir, Document(f"layerbench capacity: {s.stack} — {s.run_id}", bullets, tables,
                                            [image] if image else []))
