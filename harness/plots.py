"""A compare report's PNG plots, presentation only (harness/report.py writes the rest).

Closed loop: throughput, TTFT p95, goodput and the throughput delta against concurrency (log2 axis). Open loop:
the same against the offered rate (linear axis), and latency_vs_rate.png: TTFT p95 and E2E p95, both counted
from each request's scheduled send time, of both deployments against the offered rate; where a curve turns up
is where that deployment stopped keeping up with its arrivals."""

from __future__ import annotations

from pathlib import Path

from harness.compare import CompareSummary


def side_names(s: CompareSummary) -> tuple[str, str]:
    """Column names; an A/A compare has the same stack on both sides."""
    if s.baseline_stack == s.stack:
        return f"{s.baseline_stack} (A)", f"{s.stack} (B)"
    return s.baseline_stack, s.stack


def plots(s: CompareSummary, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    open_loop = s.open_loop
    cs = [lv.level for lv in s.levels]
    xlabel = "offered rate (req/s)" if open_loop else "concurrency"
    made = []

    def save(name: str, fig) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        made.append(name)

    def level_axis(ax) -> None:
        if open_loop:  # rates are spread as offered: a linear axis shows where latency turns up
            ax.set_xticks(cs, [f"{c:g}" for c in cs])
        else:
            ax.set_xscale("log", base=2)
            ax.set_xticks(cs, [str(c) for c in cs])

    for name, title, ylabel, bf, sf in (
        ("throughput.png", "Output throughput", "tok/s", lambda lv: lv.baseline_tok_s, lambda lv: lv.stack_tok_s),
        ("ttft_p95.png", "TTFT p95" + (" (from schedule)" if open_loop else ""), "ms",
         lambda lv: lv.baseline_ttft_p95_ms, lambda lv: lv.stack_ttft_p95_ms),
        ("goodput.png", "Goodput", "share of sent requests", lambda lv: lv.baseline_goodput,
         lambda lv: lv.stack_goodput),
    ):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for label, f, style in ((side_names(s)[0], bf, "o-"), (side_names(s)[1], sf, "s-")):
            pts = [(c, f(lv)) for c, lv in zip(cs, s.levels, strict=True) if f(lv) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), style, label=label)
        level_axis(ax)
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
        save(name, fig)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    pts = [(lv.level, lv.delta_pct, lv.ci) for lv in s.levels if lv.delta_pct is not None]
    if pts:
        c, d, ci = zip(*pts, strict=True)
        err = [[x - i.lo_pct if i else 0 for x, i in zip(d, ci, strict=True)],
               [i.hi_pct - x if i else 0 for x, i in zip(d, ci, strict=True)]]
        ax.errorbar(c, d, yerr=err, fmt="o-", capsize=4, label=f"{s.stack} vs {s.baseline_stack} (95% interval)")
    ax.axhline(0, color="black", lw=0.8)
    level_axis(ax)
    ax.set(title="Throughput delta", xlabel=xlabel, ylabel="%")
    ax.grid(alpha=0.3)
    ax.legend()
    save("delta.png", fig)
    if open_loop:
        made.append(latency_vs_rate(s, out, plt))
    return made


def latency_vs_rate(s: CompareSummary, out: Path, plt) -> str:
    """TTFT p95 and E2E p95 (from schedule) of both deployments against the offered rate."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    names = side_names(s)
    for ax, what, key in ((axes[0], "TTFT p95", "ttft_p95_ms"), (axes[1], "E2E p95", "e2e_p95_ms")):
        for label, side, style in ((names[0], "baseline", "o-"), (names[1], "stack", "s-")):
            pts = [(lv.rate, v) for lv in s.levels if (v := getattr(lv, f"{side}_{key}")) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), style, label=label)
        ax.set(title=f"{what} from schedule vs offered rate", xlabel="offered rate (req/s)", ylabel="ms")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "latency_vs_rate.png", dpi=110)
    plt.close(fig)
    return "latency_vs_rate.png"
