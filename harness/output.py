"""Presentation only: the console table and the Markdown summary of a run. Measurement lives elsewhere."""

from __future__ import annotations

from rich.table import Table

from harness.sweep import RunSummary


def fmt(v: float | None, pattern: str = "{:.1f}") -> str:
    return "—" if v is None else pattern.format(v)


LEVEL_COLUMNS = ["c", "ok/sent", "TTFT p50 ms", "TTFT p95 ms", "ITL p50 ms", "TPOT p50 ms", "E2E p95 ms",
                 "out tok/s", "goodput", "tok/chunk", "client CPU", "note"]


def level_rows(summary: RunSummary) -> list[list[str]]:
    rows = []
    for lv in summary.levels:
        s = lv.stats
        note = []
        if lv.client.bottleneck:
            note.append("CLIENT BOTTLENECK: " + "; ".join(lv.client.reasons))
        if s.failed:
            note.append("errors " + ", ".join(f"{k}={v}" for k, v in s.errors.items()))
        if lv.server.gaps:
            note.append(f"{lv.server.gaps} scrape gaps")
        rows.append([
            f"{s.concurrency}" + (f" r{s.repeat + 1}" if s.repeat else ""), f"{s.succeeded}/{s.sent}",
            fmt(s.ttft_ms.p50), fmt(s.ttft_ms.p95), fmt(s.itl_ms.p50, "{:.2f}"), fmt(s.tpot_ms.p50, "{:.2f}"),
            fmt(s.e2e_ms.p95), fmt(s.throughput_tok_s, "{:.0f}"), f"{100 * s.goodput:.0f}%",
            fmt(s.tokens_per_chunk, "{:.2f}"), f"{lv.client.cpu_pct:.0f}%", " ".join(note),
        ])
    return rows


def level_table(summary: RunSummary) -> Table:
    t = Table(title=f"{summary.stack} (vLLM {summary.engine_version}) — run {summary.run_id}")
    for col in LEVEL_COLUMNS:
        t.add_column(col, justify="left" if col == "note" else "right")
    for row in level_rows(summary):
        t.add_row(*row)
    return t


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


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
        f"- metric scrapes: {summary.scrapes}, gaps: {summary.scrape_gaps}",
        "",
        markdown_table(LEVEL_COLUMNS, level_rows(summary)),
        "",
    ]
    if summary.client_bottleneck_levels:
        lines.append(f"**Warning:** the load client was the bottleneck at c={summary.client_bottleneck_levels}; "
                     "those levels measure the client as much as the server.")
    return "\n".join(lines) + "\n"
