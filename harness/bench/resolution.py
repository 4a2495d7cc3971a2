"""Resolution section: a known overhead, switched on and off in place, as layerbench reports it.

The known-overhead proxy (+2 ms per request, +0.2 ms per chunk) sits in front of the reference engine in one
deployment; its delays are switched off and on in place, alternating ROUNDS times, so drift between
deployments cannot pose as overhead. The overhead layerbench reports is set against the configured delays
and against the executed truth (the proxy's own record of what it held)."""

from __future__ import annotations

import httpx

from harness.bench.clients import TTFT_MS, run_layerbench, sim_stack
from harness.bench.figures import Spread
from harness.bench.render import markdown_table, signed, spread
from harness.bench.section import Context, SectionResult
from stacks.sim import SimProxyStack

ITL_MS, TOKENS = 10.0, 16
LEVELS = (1, 16)
ROUNDS = 3
KNOWN = {"request_delay_ms": 2.0, "chunk_delay_ms": 0.2}
CONFIGURED_MS = 2.2  # one request's delay + the first chunk's


def measure(ctx: Context) -> list[dict]:
    off = {k: 0.0 for k in KNOWN}
    task = ctx.progress.add_task("resolution", total=len(LEVELS) * ROUNDS * 3)
    rows = []
    with sim_stack(ctx.tmp, SimProxyStack, ttft_ms=TTFT_MS, itl_ms=ITL_MS) as stack:
        proxy, direct = stack.endpoint().base_url, stack.engine.endpoint().base_url
        for c in LEVELS:
            got: dict[str, list[dict]] = {"direct": [], "off": [], "on": []}
            for _ in range(ROUNDS):
                for label, url, delays in (("direct", direct, None), ("off", proxy, off), ("on", proxy, KNOWN)):
                    ctx.progress.update(task, description=f"resolution c={c} {label}")
                    if delays is not None:
                        httpx.post(f"{proxy}/proxy/config", json=delays, timeout=5).raise_for_status()
                        httpx.post(f"{proxy}/proxy/reset", timeout=5)
                    run = run_layerbench(url, c, max(40, 8 * c), TOKENS)  # /sim/* passes through the proxy
                    held = httpx.get(f"{proxy}/proxy/stats", timeout=5).json() if delays is not None else None
                    # minus the engine's own executed timing, which drifts from run to run
                    got[label].append({**{m: run.pct(m, 50) - run.server[m]["p50_ms"] for m in ("ttft", "e2e")},
                                       "held": held["request_hold"]["p50_ms"] + held["event_hold"]["p50_ms"]
                                       if held else 0.0})
                    ctx.progress.advance(task)

            def per_round(a: str, b: str, key: str, got: dict = got) -> Spread:
                return Spread.of([x[key] - y[key] for x, y in zip(got[a], got[b], strict=True)])

            executed = per_round("on", "off", "held")
            for metric in ("ttft", "e2e"):
                reported = per_round("on", "off", metric)
                rows.append({"concurrency": c, "metric": metric, "configured_ms": CONFIGURED_MS,
                             "executed_ms": executed.to_json(), "reported_vs_proxy0_ms": reported.to_json(),
                             "error_vs_executed_ms": Spread.of([r - e for r, e in zip(
                                 reported.values, executed.values, strict=True)]).to_json(),
                             "hop_cost_ms": per_round("off", "direct", metric).to_json()})
    return rows


def _fig(d: dict) -> Spread:
    return Spread.of(d["rounds"])


def markdown(rows: list[dict]) -> list[str]:
    two = "{:.2f}".format
    return [
        f"## Resolution: a known overhead (+{KNOWN['request_delay_ms']:.0f} ms per request, "
        f"+{KNOWN['chunk_delay_ms']} ms per chunk)",
        "",
        "One deployment (reference engine + proxy); the proxy's delays are switched off and on in place, "
        f"alternating {ROUNDS} times. *Reported* is the round's difference in layerbench's p50 between on and off "
        "(each minus the engine's executed timing); *executed* is what the proxy itself recorded holding; *hop* is "
        f"what the bare proxy costs over the engine alone. {TOKENS} tokens per request; mean (min…max over rounds).",
        "",
        markdown_table(["c", "metric", "configured", "executed", "reported", "error vs executed", "hop (proxy +0)"],
                       [[str(r["concurrency"]), r["metric"].upper(), two(r["configured_ms"]),
                         spread(_fig(r["executed_ms"]), two), spread(_fig(r["reported_vs_proxy0_ms"]), two),
                         spread(_fig(r["error_vs_executed_ms"]), signed), spread(_fig(r["hop_cost_ms"]), two)]
                        for r in rows]),
    ]


def section(ctx: Context) -> SectionResult:
    rows = measure(ctx)
    return SectionResult("resolution", markdown(rows), {"rows": rows})
