"""What routing did, where a side has several engines (engine.replicas): the prefix-cache hit rate on each side, how
evenly each side's engines were loaded, and the TTFT they answered with, per level; the first screen says it at the
level where placement changed TTFT p95 the most.

The net effect is split in two from one compare, in mean TTFT (harness.analysis.latency_split): the change inside
the engines (their own TTFT histograms, summed over each side's engines: the same engines and settings on both
sides, so what differs there is where and when the requests reached them: placement decides the hits, and a layer
that groups arrivals makes more prompts share a step) and the change outside them (client − engine, the stack's
less the bare side's: the hop). The two add up to the change the client saw."""

from __future__ import annotations

from harness.analysis.latency_split import LevelSplit, split
from harness.reporting.document import Table
from harness.reporting.format import fmt, share_pct
from harness.schemas import CompareSummary, LevelDelta, Routing, level_text


def _several(s: CompareSummary) -> list[LevelDelta]:
    return [lv for lv in s.levels if lv.baseline_routing is not None and lv.stack_routing is not None
            and max(lv.baseline_routing.replicas, lv.stack_routing.replicas) > 1]


def _ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def routing_lines(s: CompareSummary) -> list[str]:
    """One sentence: at the level where TTFT p95 moved the most, the hit rates and the balance on both sides."""
    levels = [lv for lv in _several(s) if lv.baseline_ttft_p95_ms and lv.stack_ttft_p95_ms is not None]
    if not levels:
        return []
    lv = max(levels, key=lambda x: abs(x.stack_ttft_p95_ms - x.baseline_ttft_p95_ms))  # type: ignore[operator]
    b, st = lv.baseline_routing, lv.stack_routing
    assert b is not None and st is not None
    open_loop = lv.rate is not None
    change = 100 * (lv.stack_ttft_p95_ms - lv.baseline_ttft_p95_ms) / lv.baseline_ttft_p95_ms  # type: ignore[operator]
    ttft = lv.endpoints.get("ttft_p95")
    # a layer whose engines report through one endpoint (Ray Serve's metrics port) reads as one engine here
    over = f"{st.replicas} engines" if st.replicas > 1 else "its engines (their metrics reach us as one)"
    return [f"routing over {over} (the bare side: {b.replicas}, spread by the load client): at "
            f"{level_text(lv.level, open_loop)} prefix-cache hits {share_pct(b.hit_rate)} → {share_pct(st.hit_rate)}, "
            f"requests per engine max/mean {_ratio(b.imbalance)} → {_ratio(st.imbalance)}, requests held "
            f"{_ratio(b.load_imbalance)} → {_ratio(st.load_imbalance)}; TTFT p95 "
            f"{fmt(lv.baseline_ttft_p95_ms, '{:,.0f}')} → {fmt(lv.stack_ttft_p95_ms, '{:,.0f}')} ms ({change:+.0f}%"
            + (f", {ttft.verdict}" if ttft is not None else "") + "); " + split_text(_splits(s).get(lv.level))]


def _splits(s: CompareSummary) -> dict[float, LevelSplit]:
    """Each level's split, read once from the runs' summaries."""
    return {r.level: r for r in split(s.runs)} if s.runs else {}


def gain_and_hop(r: LevelSplit | None) -> tuple[float, float, float] | None:
    """(the change in mean TTFT inside the engines, outside them, the client's), ms, stack − bare; None where a
    side's engine histograms were not read (hidden behind the layer, or counting other requests than the client)."""
    if r is None or r.baseline is None or r.stack is None or r.layer_ttft_ms is None:
        return None
    inside = r.stack.engine_ttft_ms - r.baseline.engine_ttft_ms  # type: ignore[operator]
    net = r.stack.client_ttft_ms - r.baseline.client_ttft_ms  # type: ignore[operator]
    return inside, r.layer_ttft_ms, net


def split_text(r: LevelSplit | None) -> str:
    got = gain_and_hop(r)
    if got is None:
        return ("the split into routing gain and hop cost needs each side's engine TTFT histograms over the same "
                "requests as the client's, which this run did not read on both sides")
    inside, hop, net = got
    assert r is not None and r.baseline is not None and r.stack is not None
    return (f"in mean TTFT, {fmt(r.baseline.client_ttft_ms, '{:,.1f}')} → {fmt(r.stack.client_ttft_ms, '{:,.1f}')} "
            f"ms ({net:+.1f} ms) = {inside:+.1f} ms inside the engines ("
            f"{fmt(r.baseline.engine_ttft_ms, '{:,.1f}')} → {fmt(r.stack.engine_ttft_ms, '{:,.1f}')} ms: where and "
            f"when the requests reached them) "
            f"and {hop:+.1f} ms outside them (the hop)")


def _per_engine(r: Routing) -> str:
    total = sum(r.requests)
    shares = " / ".join(f"{x / total:.0%}" for x in r.requests) if total else "—"
    held = " / ".join(fmt(x, "{:.1f}") for x in r.in_engine) if r.in_engine else "—"
    return f"{shares} (held {held})"


def routing_tables(s: CompareSummary) -> list[Table]:
    levels = _several(s)
    if not levels:
        return []
    splits = _splits(s)
    rows = []
    for lv in levels:
        b, st = lv.baseline_routing, lv.stack_routing
        assert b is not None and st is not None
        got = gain_and_hop(splits.get(lv.level))
        rows.append([level_text(lv.level, lv.rate is not None), share_pct(b.hit_rate), share_pct(st.hit_rate),
                     _per_engine(b), _per_engine(st), _ratio(b.imbalance), _ratio(st.imbalance),
                     _ratio(b.load_imbalance), _ratio(st.load_imbalance),
                     *(("—", "—") if got is None else (f"{got[0]:+.1f}", f"{got[1]:+.1f}"))])
    return [("Where the requests went", "Each side's engines read from their own counters over the measured windows: "
             "the prefix-cache hit rate (hits over queries, in tokens, every engine), each engine's share of the "
             "requests it finished and the requests it held on average (running and waiting, by Little's law from "
             "its own latency histogram), and max/mean over the engines (1.00: even). The last two columns split "
             "the change in mean TTFT (stack − bare, ms): inside the engines, what their placement bought, and "
             "outside them, the hop; together they make the change the client saw.",
             ["level", "hits, bare", "hits, stack", "per engine, bare", "per engine, stack", "requests max/mean, bare",
              "stack", "held max/mean, bare", "stack", "TTFT inside engines, ms", "outside (hop), ms"], rows)]
