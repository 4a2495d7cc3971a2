"""Capacity section: the highest SSE event rate one client process sustains before its TTFT error grows.

Rising concurrency, floor first at each level. A client is past its capacity once its excess TTFT error over
the floor (same level, same server, moments apart) has grown by EXCESS_LIMIT_MS over its excess at the lowest
level: a fixed offset is accuracy, growth with load is saturation. The sweep ends where the floor itself
degrades: the reference engine is saturated and no client can be judged. A ratio of capacities that were
not established (engine-limited, or no level sustained) is flagged, not printed as a result."""

from __future__ import annotations

from harness.bench.clients import CLIENTS, RUNNERS, TTFT_MS, ClientRun, sim_stack
from harness.bench.render import markdown_table, signed
from harness.bench.section import Context, SectionResult

ITL_MS, TOKENS = 5.0, 64
LEVELS = (16, 32, 64, 128, 192, 256)
EXCESS_LIMIT_MS = 1.0  # a client is past capacity once its excess over the floor grows by this much
SATURATED_MS = 5.0  # the floor's error this far above its lowest-level value: the engine, not a client, is full
RATIO_MIN = 1.5

Sweep = dict[str, list[ClientRun]]


def measure(ctx: Context) -> Sweep:
    out: Sweep = {name: [] for name in CLIENTS}
    alive = set(CLIENTS)
    task = ctx.progress.add_task("capacity", total=len(CLIENTS) * len(LEVELS))
    with sim_stack(ctx.tmp, ttft_ms=TTFT_MS, itl_ms=ITL_MS) as sim:
        url = sim.endpoint().base_url
        for c in LEVELS:
            for name in CLIENTS:
                ctx.progress.advance(task)
                if name not in alive:
                    continue
                ctx.progress.update(task, description=f"capacity c={c} {name}")
                run = RUNNERS[name](url, c, 3 * c, TOKENS)
                out[name].append(run)
                if name == "floor" and saturated(out["floor"]):
                    alive.clear()
                    break
                if name != "floor" and growth(out[name], out["floor"]) >= EXCESS_LIMIT_MS:
                    alive.discard(name)
    return out


def excess(run: ClientRun, floor: ClientRun) -> float:
    return run.err("ttft", 50) - floor.err("ttft", 50)


def saturated(floors: list[ClientRun]) -> bool:
    return floors[-1].err("ttft", 50) - floors[0].err("ttft", 50) > SATURATED_MS


def growth(runs: list[ClientRun], floors: list[ClientRun]) -> float:
    by_c = {f.concurrency: f for f in floors}
    return excess(runs[-1], by_c[runs[-1].concurrency]) - excess(runs[0], by_c[runs[0].concurrency])


def capacity_of(runs: list[ClientRun], floors: list[ClientRun]) -> tuple[float, bool]:
    """(highest sustained event rate, whether the client was still fine where the sweep ended)."""
    ok = [r for i, r in enumerate(runs) if growth(runs[: i + 1], floors) < EXCESS_LIMIT_MS
          and not saturated([f for f in floors if f.concurrency <= r.concurrency])]
    rate = max((r.event_rate for r in ok), default=0.0)
    return rate, len(ok) == len(runs) and not any(growth(runs[: i + 1], floors) >= EXCESS_LIMIT_MS
                                                   for i in range(len(runs)))


def capacity_ratio(lb: tuple[float, bool], vb: tuple[float, bool], engine_limited: bool) -> tuple[str, bool | None]:
    """(layerbench's capacity over `vllm bench serve`'s in words, whether ≥ RATIO_MIN; None: not established)."""
    (a, a_open), (b, b_open) = lb, vb
    a_open, b_open = a_open and engine_limited, b_open and engine_limited
    if a <= 0 or b <= 0:
        who = "layerbench" if a <= 0 else "`vllm bench serve`"
        return f"invalid: {who} sustained no level (no capacity to divide by)", None
    if a_open and b_open:
        return "not established: both clients were still fine where the engine saturated", None
    if a_open:
        return f"≥ {a / b:.1f}× (layerbench was still fine where the engine saturated)", a / b >= RATIO_MIN or None
    if b_open:
        return f"≤ {a / b:.1f}× (`vllm bench serve` was still fine where the engine saturated)", \
            False if a / b < RATIO_MIN else None
    return f"{a / b:.1f}×", a / b >= RATIO_MIN


def markdown(cap: Sweep) -> list[str]:
    floors = cap["floor"]
    cap_of = {name: capacity_of(runs, floors) for name, runs in cap.items() if name != "floor"}
    engine_limited = bool(floors) and saturated(floors)
    by_c = {r.concurrency: r for r in floors}

    def cell(name: str, c: int) -> str:
        run = next((r for r in cap[name] if r.concurrency == c), None)
        if run is None:
            return "—"
        if name == "floor":
            mark = " (engine saturated)" if saturated([r for r in floors if r.concurrency <= c]) else ""
            return f"{run.event_rate:,.0f} ev/s, err {signed(run.err('ttft', 50))}{mark}"
        return f"{run.event_rate:,.0f} ev/s, excess {signed(excess(run, by_c[c]))}"

    def text(name: str) -> str:
        rate, unbounded = cap_of[name]
        if rate <= 0:
            return "none sustained"
        return f"≥ {rate:,.0f} (engine-limited)" if unbounded and engine_limited else f"{rate:,.0f}"

    words, _ = capacity_ratio(cap_of["layerbench"], cap_of["vllm bench serve"], engine_limited)
    return [
        f"## Capacity: SSE events per second one client process sustains before its TTFT error grows by "
        f"{EXCESS_LIMIT_MS:.0f} ms ({ITL_MS:.0f} ms per token, one token per event)",
        "",
        "One sweep (no rounds): the cells are single runs, so a growth near the limit may be noise.",
        "",
        markdown_table(["client", *[f"c={c}" for c in LEVELS], "capacity (events/s)"],
                       [[name, *[cell(name, c) for c in LEVELS], "(reference)" if name == "floor" else text(name)]
                        for name in CLIENTS]),
        "",
        f"- layerbench's capacity over `vllm bench serve`'s: {words} (target ≥ {RATIO_MIN}×). A client is past its "
        f"capacity once its excess over the floor has grown by {EXCESS_LIMIT_MS:.0f} ms over its excess at "
        f"c={LEVELS[0]} (a constant offset is accuracy; growth with load is saturation); the last cell of a row is "
        "the first level past it.",
        "- Client and reference engine share the machine's cores. The sweep stops where the floor's own error "
        f"has grown by > {SATURATED_MS:.0f} ms: the engine, not a client, is saturated there, and a client that was "
        "still fine is reported as ≥ its last rate.",
    ]


def section(ctx: Context) -> SectionResult:
    cap = measure(ctx)
    floors = cap["floor"]
    words, met = capacity_ratio(capacity_of(cap["layerbench"], floors), capacity_of(cap["vllm bench serve"], floors),
                                bool(floors) and saturated(floors))
    data = {name: [{"concurrency": r.concurrency, "events_per_s": r.event_rate, "ttft_err_p50": r.err("ttft", 50)}
                   for r in runs] for name, runs in cap.items()}
    return SectionResult("capacity", markdown(cap), {"sweep": data, "ratio": words, "ratio_meets_target": met})
