"""A single run's outputs, presentation only: its console table, its Markdown summary with the health warnings,
and its cost."""

from __future__ import annotations

from rich.table import Table

from harness.analysis.cost import Price, usd
from harness.analysis.steady import likely_cause
from harness.load.topology import cores_sentence
from harness.reporting.format import fmt, markdown_table, scrape_policy_text
from harness.schemas import RunSummary, levels_text

LEVEL_COLUMNS = ["c", "ok/sent", "TTFT p50 ms", "TTFT p95 ms", "ITL p50 ms", "TPOT p50 ms", "E2E p95 ms",
                 "out tok/s", "goodput", "tok/chunk", "client CPU", "note"]


# open loop: levels are offered rates, TTFT and E2E count from each request's scheduled send time
# sent / scheduled: the rate the client kept, of the schedule's (a Poisson draw of n gaps is off the offered rate)
OPEN_LOOP_COLUMNS = ["rate (req/s)", "sent / scheduled req/s", *LEVEL_COLUMNS[1:]]


def level_columns(summary: RunSummary) -> list[str]:
    return OPEN_LOOP_COLUMNS if summary.open_loop else LEVEL_COLUMNS


def level_rows(summary: RunSummary) -> list[list[str]]:
    rows = []
    open_loop = summary.open_loop
    for lv in summary.levels:
        s = lv.stats
        note = []
        if s.off_schedule:
            note.append(f"OFF SCHEDULE: {s.off_schedule}")
        if lv.client.reasons:
            note.append("; ".join(lv.client.reasons))
        if s.steady.steady is False:
            note.append("NOT STEADY: " + "; ".join(s.steady.reasons) + " (likely cause: "
                        + likely_cause(s.steady, s.ttft_modes, lv.client.starved) + ")")
        if s.ttft_modes:
            note.append(s.ttft_modes.text())
        if s.failed:
            note.append("errors " + ", ".join(f"{k}={v}" for k, v in s.errors.items()))
        if lv.server.gaps:
            note.append(f"{lv.server.gaps} scrape gaps")
        if lv.incomplete:
            note.insert(0, f"STOPPED EARLY: {lv.incomplete}")
        level = f"{s.rate:g}" if s.rate is not None else f"{s.concurrency}"
        rows.append([
            level + (f" r{s.repeat + 1}" if s.repeat else ""),
            *([f"{fmt(s.achieved_rate)} / {fmt(s.scheduled_rate)}"] if open_loop else []), f"{s.succeeded}/{s.sent}",
            fmt(s.ttft_ms.p50), fmt(s.ttft_ms.p95), fmt(s.itl_ms.p50, "{:.2f}"), fmt(s.tpot_ms.p50, "{:.2f}"),
            fmt(s.e2e_ms.p95), fmt(s.throughput_tok_s, "{:.0f}"), f"{100 * s.goodput:.0f}%",
            fmt(s.tokens_per_chunk, "{:.2f}"), f"{lv.client.cpu_pct:.0f}%", " ".join(note),
        ])
    return rows


def level_table(summary: RunSummary) -> Table:
    t = Table(title=f"{summary.stack} (vLLM {summary.engine_version}) — run {summary.run_id}")
    for col in level_columns(summary):
        t.add_column(col, justify="left" if col == "note" else "right")
    for row in level_rows(summary):
        t.add_row(*row)
    return t


def summary_markdown(summary: RunSummary, meta: dict) -> str:
    a = summary.applied
    lines = [
        f"# layerbench run {summary.run_id}",
        "",
        f"- stack: **{summary.stack}**, engine vLLM **{summary.engine_version}**, profile `{summary.profile}`,"
        f" status **{summary.status}**",
        f"- applied: max_model_len={a.max_model_len}, KV cache tokens={a.kv_cache_tokens}, "
        f"max concurrency={a.max_concurrency}x at {a.max_concurrency_at_tokens} tokens/request",
        f"- host: {meta.get('host', {}).get('cpus')} CPUs, git {meta.get('git')}",
        *([f"- prompt lengths counted with {summary.tokenizer}"] if summary.tokenizer else []),
        f"- metric scrapes: {summary.scrapes} ({scrape_policy_text(summary.scrape_policy)}), gaps: "
        f"{summary.scrape_gaps}" + "".join(f", {k} {v}" for k, v in summary.scrape_gap_reasons.items())
        + f"; a scrape took {fmt(summary.scrape_ms.p50)} ms p50, {fmt(summary.scrape_ms.max)} max",
        f"- placement: {meta.get('placement', {}).get('sentence', '—')}",
        "- cores: " + cores_sentence(summary.cores, meta.get("placement", {}).get("host_cores", 0),
                                     summary.engine_binding, summary.sampler_cpu_pct),
        f"- warmup sweep over every level before measuring: {'yes' if summary.warmup_sweep else 'no'}",
        "",
        markdown_table(level_columns(summary), level_rows(summary)),
        "",
    ]
    lines += [f"**Warning:** {w}" for w in health_warnings(summary)]
    if summary.stopped:
        lines.insert(3, f"- **stopped early**: {summary.stopped}; every level above it is kept")
    if summary.exposed_ports:
        lines.insert(3, f"- **listens beyond loopback**: {', '.join(summary.exposed_ports)}")
    return "\n".join(lines) + "\n"


def health_warnings(summary: RunSummary, who: str = "") -> list[str]:
    """One line per kind of trouble, saying what it means for the numbers."""
    return [text for _, text in health_items(summary, who)]


def health_items(summary: RunSummary, who: str = "") -> list[tuple[str, str]]:
    """health_warnings with each line's kind, as a report's folded warnings count them."""
    out = []
    ol = summary.open_loop
    if summary.off_schedule_levels:
        out.append(("late schedule", f"the load client could not keep to the arrival schedule{who} at "
                    f"{levels_text(summary.off_schedule_levels, True)}: those levels were offered less (or burstier) "
                    "load than their rate says; the level's note gives the achieved rate and the client's lateness."))
    if summary.client_saturated_levels:
        out.append(("saturated client", f"the load client was saturated{who} at "
                    f"{levels_text(summary.client_saturated_levels, ol)}: those levels measure the client as much as "
                    "the server."))
    if summary.client_starved_levels:
        out.append(("starved client", f"the load client was starved of CPU by the deployment{who} at "
                    f"{levels_text(summary.client_starved_levels, ol)} (high event-loop lag at low client CPU): "
                    "timestamps there are late by up to the loop lag shown in the level's note."))
    if summary.not_steady_levels:
        out.append(("not steady", f"not steady{who} at {levels_text(summary.not_steady_levels, ol)}: the two halves "
                    "of the window differ by more than their noise (see the level's note); the level's mean hides a "
                    "change of state."))
    return out


def cost_markdown(summary: RunSummary, price: Price, wall_s: float) -> str:
    """The run's cost and $ per million output tokens at each level, at a GPU's hourly price."""
    lines = ["", f"**Cost** at {price.text()}: this run {usd(price.run_usd(wall_s))}; per million output tokens: "
             + ", ".join(f"{lv.stats.level_text} {usd(price.usd_per_mtok(lv.stats.throughput_tok_s))}"
                         for lv in summary.levels)]
    return "\n".join(lines) + "\n"
