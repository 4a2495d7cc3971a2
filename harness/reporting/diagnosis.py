"""The report's account of why the layer costs: the rules that fired with their evidence, the functions the
layer's processes spend CPU in per request beyond the bare engine's, and what the profiled windows cost."""

from __future__ import annotations

from harness.analysis.latency_split import mean_of, split
from harness.reporting.document import Table
from harness.schemas import CompareSummary, level_text


def diagnosis_lines(s: CompareSummary) -> list[str]:
    """The headline's line: the first finding and the option to try, or that no rule fired."""
    if s.diagnosis is None:
        return []
    return [f"**{s.diagnosis.headline()}**"]


def diagnosis_tables(s: CompareSummary) -> list[Table]:
    d = s.diagnosis
    if d is None:
        return []
    out: list[Table] = []
    open_loop = s.runs["stack"].open_loop if "stack" in s.runs else False
    rows = [[level_text(f.level, open_loop), f.rule, f.text, "; ".join(f.evidence), f"`{f.suggest}`" if f.suggest
             else ""] for f in d.findings]
    out.append(("Why the layer costs", f"The rules checked at every level: {', '.join(d.checked)}. "
                + ("None fired." if not d.findings else "Each row names the evidence and the option to try.")
                + f" Profiles: {d.profiled}.", ["level", "rule", "finding", "evidence", "try"], rows))
    diff = [[where, fd.frame, f"{fd.stack_ms:.3f}", f"{fd.baseline_ms:.3f}", f"{fd.extra_ms:+.3f}"]
            for where, deltas in d.differential.items() for fd in deltas]
    if diff:
        out.append(("Where the layer's CPU goes (ms of CPU per request)",
                    "Each process's measured CPU in the profiled window, per completed request, split over its "
                    "functions by py-spy's on-CPU samples (self time), summed over the side's processes (the load "
                    "client's left out); the functions the stack spends the most in beyond the bare engine, ten "
                    "per level at most.", ["level", "function", "stack", "bare", "extra"], diff))
    if own := _layer_account(s, open_loop):
        out.append(("The layer's own account of its time (ms per request)",
                    "What the layer says it spent on each request, from the response headers it times itself in, "
                    "against the E2E the layer added over the bare engine (p50 against p50); the rest is "
                    "unattributed: the layer's time it does not count, or the network between.",
                    ["level", "header", "p50", "p95", "E2E added (p50)", "unattributed"], own))
    if spans := _spans(s, open_loop):
        out.append(spans)
    prof = [[label, level_text(p.level, open_loop), f"{p.window_s:.1f}", f"{p.tok_s:,.0f}",
             f"{p.judged_tok_s:,.0f}" if p.judged_tok_s else "–",
             f"{p.profiler_cost_pct:+.1f}%" if p.profiler_cost_pct is not None else "–",
             f"{p.profiler_cpu_s / p.window_s:.2f}" if p.window_s else "–",
             ", ".join(f"{x.label} ({x.why_not})" for x in p.processes if x.why_not) or "none"]
            for label, run in s.runs.items() for p in run.profiled]
    if prof:
        out.append(("The profiled windows (not judged)",
                    "One more window per level after the judged ones, every process sampled: its throughput "
                    "against the judged windows' mean is what sampling cost; py-spy's own CPU in cores.",
                    ["side", "level", "window s", "tok/s", "judged tok/s", "vs judged", "py-spy cores",
                     "not profiled"], prof))
    return out


def _layer_account(s: CompareSummary, open_loop: bool) -> list[list[str]]:
    base, stack = s.runs.get("baseline"), s.runs.get("stack")
    if base is None or stack is None:
        return []
    rows = []
    last = {lv.stats.level: lv for lv in stack.levels if lv.layer_headers}  # a level's last window speaks for it
    for lv in last.values():
        bare = next((b for b in reversed(base.levels) if b.stats.level == lv.stats.level), None)
        added = (lv.stats.e2e_ms.p50 - bare.stats.e2e_ms.p50) if bare is not None and lv.stats.e2e_ms.p50 is not \
            None and bare.stats.e2e_ms.p50 is not None else None
        for name, d in lv.layer_headers.items():
            rest = f"{added - d.p50:+.1f}" if added is not None and d.p50 is not None else "–"
            rows.append([level_text(lv.stats.level, open_loop), name, f"{d.p50:.1f}" if d.p50 is not None else "–",
                         f"{d.p95:.1f}" if d.p95 is not None else "–", f"{added:+.1f}" if added is not None else "–",
                         rest])
    return rows


def _spans(s: CompareSummary, open_loop: bool) -> Table | None:
    """Where the time outside the engine went, by the layer's own nested spans (Stack.layer_metrics' span_ms):
    per level, the client's mean E2E, each span's mean, the engine's mean E2E, and each hop between them (the
    client's time before the outermost span, each span's time outside the next, the innermost's outside the
    engine). A span the layer did not report that level leaves its hops unattributed."""
    stack = s.runs.get("stack")
    if stack is None or not stack.layer_spans:
        return None
    names = list(stack.layer_spans)
    rows = []
    for r in split({"stack": stack}):
        at = [lv for lv in stack.levels if lv.stats.level == r.level and lv.incomplete is None]
        means = [mean_of([stack.layer_spans[k] * lv.server.layer[k] for lv in at if k in lv.server.layer])
                 for k in names]
        if r.stack is None or all(m is None for m in means):
            continue
        chain = [r.stack.client_e2e_ms, *means, r.stack.engine_e2e_ms]
        hops = [f"{a - b:+.1f}" if a is not None and b is not None else "unattributed"
                for a, b in zip(chain, chain[1:], strict=False)]
        rows.append([level_text(r.level, open_loop), *[f"{v:.1f}" if v is not None else "—" for v in chain], *hops])
    if not rows:
        return None
    header = ["level", "client E2E", *names, "engine E2E", f"before {names[0]}",
              *[f"{a} outside {b}" for a, b in zip(names, names[1:], strict=False)],
              f"{names[-1]} outside the engine"]
    return (f"Where the time outside the engine went, by {s.stack}'s own spans (ms per request, means)",
            "The layer times parts of each request itself, each part holding the next and the engine's E2E "
            "(as the stack declares them): the difference between one and the next is the time that hop took "
            "outside the next (its own work, its queue, the call between). Means over the level's windows; the "
            "layer's figures are exported on its own schedule, so a window's may cover slightly other requests.",
            header, rows)
