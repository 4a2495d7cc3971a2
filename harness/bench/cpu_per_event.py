"""CPU-per-event section: the CPU microseconds each client process spends per SSE event at c=64.

Each round runs every client at two sizes; the difference of CPU over the difference of events cancels fixed
costs (connection setup, the warmup wave; for `vllm bench serve`, whatever of its startup precedes its first
request is not counted at all, since its vLLM import alone varies by seconds). A machine-independent capacity
figure: the event rate one core would sustain at that cost. Reported as the median over rounds and their
range; a round giving a cost ≤ 0 is impossible and makes the figure invalid, with the reason."""

from __future__ import annotations

from harness.bench.clients import CLIENTS, RUNNERS, TTFT_MS, rotated, sim_stack
from harness.bench.figures import Figure, Invalid, Spread, positive, ratio
from harness.bench.render import markdown_table, spread
from harness.bench.section import Context, SectionResult

ITL_MS, TOKENS, CONCURRENCY = 5.0, 64, 64
SIZES = (64, 640)  # requests per run: the difference (576 requests, ~37k events) carries the per-event cost
ROUNDS = 3
NOT_CANCELLED = "fixed costs did not cancel between the two run sizes"


def measure(ctx: Context, rounds: int, sizes: tuple[int, int] = SIZES, clients: tuple[str, ...] = CLIENTS
            ) -> dict[str, list[float]]:
    """client -> CPU µs per event, one value per round."""
    out: dict[str, list[float]] = {name: [] for name in clients}
    task = ctx.progress.add_task("cpu per event", total=len(clients) * 2 * rounds)
    with sim_stack(ctx.tmp, ttft_ms=TTFT_MS, itl_ms=ITL_MS) as sim:
        url = sim.endpoint().base_url
        for k in range(rounds):
            for name in rotated(clients, k):
                cost = {}
                for n in sizes if k % 2 == 0 else sizes[::-1]:  # alternate which size runs first
                    ctx.progress.update(task, description=f"cpu per event {name} n={n} (round {k + 1}/{rounds})")
                    run = RUNNERS[name](url, CONCURRENCY, n, TOKENS)
                    cost[n] = (run.cpu_s, run.events)
                    ctx.progress.advance(task)
                (c1, e1), (c2, e2) = cost[min(sizes)], cost[max(sizes)]
                out[name].append((c2 - c1) / (e2 - e1) * 1e6 if e2 > e1 else float("nan"))
    return out


def figures(us: dict[str, list[float]]) -> dict[str, Figure]:
    return {name: positive(v, "CPU per event", NOT_CANCELLED) for name, v in us.items()}


def per_core(fig: Figure) -> Figure:
    if isinstance(fig, Invalid):
        return fig
    return Spread.of([1e6 / v for v in fig.values])


def markdown(figs: dict[str, Figure], rounds: int) -> list[str]:
    def cell(fig: Figure, fmt) -> str:
        return spread(fig, fmt, "median") if isinstance(fig, Spread) else f"invalid: {fig.reason}"

    lines = [
        f"## CPU per SSE event (c={CONCURRENCY}, {ITL_MS:.0f} ms per token)",
        "",
        f"Each of {rounds} rounds runs every client at {SIZES[0]} and {SIZES[1]} requests; CPU difference over event "
        "difference, so fixed costs cancel (for `vllm bench serve`, its startup before the first request is not "
        "counted). *Median (min…max over rounds)*; *events/s per core* is the rate one core would sustain at that "
        "cost.",
        "",
        markdown_table(["client", "CPU µs per event", "events/s per core"],
                       [[name, cell(fig, "{:.1f}".format), cell(per_core(fig), "{:,.0f}".format)]
                        for name, fig in figs.items()]),
        "",
    ]
    if "layerbench" in figs and "vllm bench serve" in figs:
        r = ratio(figs["vllm bench serve"], figs["layerbench"])
        lines.append("- By CPU cost, layerbench sustains " + (
            f"{spread(r, '{:.1f}×'.format, 'median')} the event rate of `vllm bench serve` per core (per round)."
            if isinstance(r, Spread) else f"— of `vllm bench serve`'s event rate per core: invalid, {r.reason}."))
    return lines


def section(ctx: Context) -> SectionResult:
    us = measure(ctx, ROUNDS, SIZES)
    figs = figures(us)
    return SectionResult("cpu_per_event", markdown(figs, ROUNDS),
                         {"sizes": list(SIZES), "concurrency": CONCURRENCY,
                          "us_per_event": {k: f.to_json() for k, f in figs.items()}})
