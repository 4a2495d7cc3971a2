"""Presentation only: what the run's requests looked like, sent and as the engine confirmed them (harness.analysis.
lengths), as one report table."""

from __future__ import annotations

import json
from pathlib import Path

from harness.analysis.lengths import by_turn, sent_and_confirmed
from harness.analysis.samples import SideReplay, by_stretch
from harness.reporting.document import Table
from harness.reporting.format import fmt
from harness.schemas import Dist


def run_profile(run_dir: Path) -> dict:
    """The profile the run recorded in run.json ({} when it cannot be read)."""
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta.get("profile") or {} if isinstance(meta, dict) else {}


def _q(d: Dist) -> str:
    return "—" if not d.n else " / ".join(fmt(x, "{:.0f}") for x in (d.p50, d.p95, d.max))


def lengths_table(run_dir: Path, keep: set | None, shape: str) -> list[Table]:
    """Per side: the prompt and output lengths drawn for its measured requests against the engine's usage."""
    got = sent_and_confirmed(run_dir, keep)
    rows = []
    for label, fields in got.items():
        for name, (sent, confirmed) in fields.items():
            off = "—" if not (sent.n and confirmed.n and sent.mean) else \
                f"{100 * (confirmed.mean / sent.mean - 1):+.1f}%"  # type: ignore[operator]
            rows.append([label, name, str(confirmed.n), _q(sent), _q(confirmed), fmt(sent.mean, "{:.1f}"),
                         fmt(confirmed.mean, "{:.1f}"), off])
    if not rows:
        return []
    return [(f"Request lengths, sent and confirmed ({shape})", "Sent: what the profile drew for each measured "
             "request (its prompt's length by the served model's tokenizer, and its max_tokens). Confirmed: the "
             "engine's own usage block (prompt_tokens, completion_tokens). Percentiles p50 / p95 / max in tokens; "
             "the last column is the confirmed mean against the sent one (a chat template adds prompt tokens; a "
             "layer that cuts answers short shows here).",
             ["deployment", "length", "requests", "sent p50 / p95 / max", "confirmed p50 / p95 / max", "sent mean",
              "confirmed mean", "confirmed vs sent"], rows)]


def turns_table(run_dir: Path, keep: set | None) -> list[Table]:
    """A multi-turn profile's TTFT by turn, per side: the context grows turn by turn, and so does the prefill."""
    got = by_turn(run_dir, keep)
    if not any(len(turns) > 1 for turns in got.values()):
        return []
    rows = [[label, str(t + 1), str(d.n), fmt(d.p50, "{:.1f}"), fmt(d.p95, "{:.1f}"), fmt(ctx.p50, "{:.0f}")]
            for label, turns in got.items() for t, (d, ctx) in sorted(turns.items())]
    return [("TTFT by turn", "Each turn of a chat sends the conversation so far, so its prompt (the engine's "
             "prompt_tokens, p50 in the last column) grows turn by turn; the prefix cache holds the earlier turns.",
             ["deployment", "turn", "requests", "TTFT p50 ms", "TTFT p95 ms", "prompt tokens p50"], rows)]


def trace_table(profile, hits: dict[str, dict[float, float]] | None = None,
                sides: dict[str, SideReplay] | None = None) -> list[Table]:
    """What a trace profile replayed (both sides the same): its window, rates, reuse and what was left out; hits:
    each side's prefix-cache hit rate by level (the engines' own counters), set beside the trace's reuse; sides:
    how each side's client kept to the schedule, and the waits of the turns a chat held (trace `sessions`)."""
    if profile is None or profile.trace is None:
        return []
    t, levels = profile.replay(), profile.levels()
    reuse = t.reuse()

    def by_level(rates: dict[float, float | None]) -> str:
        return " / ".join("—" if (x := rates.get(lv)) is None else f"{x:.0%}" for lv in levels)

    engines = [[f"prefix-cache hits, {side} (its engines' counters)", by_level(rates)]
               for side, rates in (hits or {}).items()]
    if len(levels) > 1:
        stretch = t.span_s / len(levels)
        engines = [["segments (the levels, in the trace's order)", f"{len(levels)} stretches of {stretch:.1f} s: "
                    + ", ".join(f"{lv:g}" for lv in levels) + " req/s"],
                   ["prompt tokens in blocks sent before, by segment",
                    by_level({lv: t.reuse(profile.segment(lv)) for lv in levels})], *engines]
    if profile.trace.sessions:
        chats = len({r.chat for r in t.requests if r.chat is not None})
        engines.append(["chats", f"{chats}: a turn goes out at its own time, or when its chat's previous answer "
                        "ended if that is later (sessions)"])
        for side, got in (sides or {}).items():
            d = Dist.of(got.held)
            engines.append([f"turns held for the previous answer, {side}", f"{len(got.held)} of {got.requests}" + (
                f", by {fmt(d.p50, '{:.0f}')} ms at p50 and {fmt(d.max, '{:.0f}')} ms at most" if got.held else "")])
    for side, got in (sides or {}).items():
        if got.rates and got.late:
            late = Dist.of(got.late)
            scheduled, achieved = (sum(x) / len(got.rates) for x in zip(*got.rates, strict=True))
            engines.append([f"sent on schedule, {side}", f"{achieved:.3f} req/s sent against {scheduled:.3f} "
                            f"scheduled (mean of {len(got.rates)} windows); the client late by "
                            f"{fmt(late.p50, '{:.2f}')} / {fmt(late.p99, '{:.2f}')} / {fmt(late.max, '{:.2f}')} ms "
                            "(p50 / p99 / max, its scheduling delay)"])
    rows = [["file", f"{t.path} ({t.format})"], ["requests replayed", f"{len(t.requests)} of {t.rows}"],
            ["span", f"{t.span_s:.1f} s (time_scale {t.time_scale:g})"],
            ["rate", f"{t.mean_rate():.2f} req/s on average, {t.peak_rate():.0f} req/s at its busiest second"],
            ["prompt tokens in blocks sent before", "—" if reuse is None else f"{reuse:.0%} "
             f"({t.block_tokens}-token blocks: what a prefix cache that kept every block would hit)"],
            *engines,
            ["arrivals", "evenly spaced at the replay's mean rate (arrivals: even)" if t.even else
             "on a coarse grid of " + f"{t.grid_ms / 1e3:g} s, " + ("spread over each tick (jitter: spread)"
             if t.spread else "sent in its bursts") if t.grid_ms is not None else "as the trace has them"],
            ["skipped", f"{t.failed} failed in the trace, {t.too_long} beyond max_model_len, {t.outside} outside the "
             f"window; {t.cut} answers cut to fit max_model_len"]]
    return [("The trace replayed", "Both sides sent the same requests at the same offsets from the replay's start "
             "(a segment's from its own first request; with sessions, a turn no earlier than its chat's previous "
             "answer), each prompt built from the trace's block ids (a block's text the same wherever its id "
             "recurs, fresh for each run) and each latency counted from when it was due to go out.", ["", ""], rows)]


def minutes_table(profile, run_dir: Path, keep: set | None) -> list[Table]:
    """A replay's TTFT and E2E stretch by stretch, per side: where in the trace a layer's cost grows. A minute a
    stretch, or 10 s for a replay shorter than 2 minutes (a one-minute table says no more than the latency table)."""
    if profile is None or profile.trace is None:
        return []
    trace = profile.replay()
    step = 60 if trace.span_s >= 120 else 10
    got = by_stretch(run_dir, trace.offsets_ns(), step * 1_000_000_000, keep)
    stretches = sorted({k for per in got.values() for k in per})
    rows = []
    for k in stretches:
        for label, per in got.items():
            if k in per:
                ttft, e2e = Dist.of(per[k][0]), Dist.of(per[k][1])
                name = f"{k}–{k + 1}" if step == 60 else f"{step * k}–{step * (k + 1)} s"
                rows.append([name, label, str(ttft.n), *(fmt(x, "{:.0f}") for x in (
                    ttft.p50, ttft.p95, e2e.p50, e2e.p95))])
    if len(stretches) < 2:
        return []
    title = "The replay minute by minute" if step == 60 else f"The replay {step} s by {step} s"
    return [(title, f"TTFT and E2E of each {'minute' if step == 60 else f'{step} s'} of the replay (a request's "
             "place is its time in the trace, counted from its first request; latency from each request's "
             "scheduled send; every pair's windows pooled), so a cost that grows in the trace's busy stretches "
             "shows where it grows.",
             ["minute" if step == 60 else "seconds", "deployment", "requests", "TTFT p50 ms", "TTFT p95 ms",
              "E2E p50 ms", "E2E p95 ms"], rows)]
