"""Reports, presentation only: reports/<run-id>/report.md + report.html + PNG plots from a compare's summary,
and `make report`'s all-stacks table from every run under results/. Tables follow the seed study's shape."""

from __future__ import annotations

import json
from pathlib import Path

from harness.audit import AuditResult
from harness.catalog import RunEntry, read_results
from harness.compare import CompareSummary
from harness.output import fmt, health_warnings, markdown_table, scrape_policy_text
from harness.plots import plots, side_names
from harness.render import Table, write_document
from harness.topology import cores_sentence

REPORTS_DIR = Path("reports")
CPU_HOST_NOTE = (
    "On a CPU host the engine uses every core, so a layer's processes take their CPU from the engine and the "
    "measured cost is inflated; on a GPU host the engine's work runs on the accelerator and the layer does not "
    "compete with it for these cores. Read the CPU breakdown before generalising a CPU-host delta."
)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


def _level_head(s: CompareSummary) -> str:
    return "rate (req/s)" if s.open_loop else "c"


def _level(lv) -> str:
    """A level's first cell: its concurrency, or its offered rate in an open loop."""
    return f"{lv.rate:g}" if lv.rate is not None else str(lv.concurrency)


def tables(s: CompareSummary) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, caption, header, rows) for every table of the report; md and html render the same data."""
    b, st = side_names(s)
    lh = _level_head(s)
    out = []
    out.append(("Versions and engine settings", "Both deployments must run the same engine with the same settings; "
                "the values below are what each one reported applying (/v1/models, startup log).",
                ["", f"baseline ({b})", f"stack ({st})"],
                [["vLLM version", s.versions.get("baseline", "—"), s.versions.get("stack", "—")]]
                + [[field, str(getattr(s.applied.get("baseline"), field, "—")),
                    str(getattr(s.applied.get("stack"), field, "—"))]
                   for field in ("max_model_len", "kv_cache_tokens", "max_concurrency", "max_concurrency_at_tokens")]))
    aa = s.aa.levels if s.aa else {}
    out.append(("Throughput (output tok/s)", f"Mean of {s.repeats} repeat(s). The delta's 95% interval comes from "
                "the repeats (Welch's t on the log ratio); a delta is an overhead or a gain only when its interval "
                "excludes 0." + (" Open loop: both deployments were offered the same requests per second, so their "
                                 "output tok/s differ only where one fell behind its arrivals (or by the tail of a "
                                 "short window); read the latency table." if s.open_loop else "")
                + (f" A/A: the latest bare-vLLM-vs-bare-vLLM compare of this profile ({s.aa.run_id}), "
                                 "this host's noise floor." if s.aa else " No A/A compare of this profile yet "
                                 "(`make compare STACK=vllm`)."),
                [lh, f"{b}", f"{st}", "delta", "95% interval", "verdict", "A/A delta (± half-width)"]
                + (["measured in"] if s.invocations > 1 else []),
                [[_level(lv), fmt(lv.baseline_tok_s), fmt(lv.stack_tok_s), fmt(lv.delta_pct, "{:+.1f}%"),
                  lv.ci.text() + ("" if lv.ci.source == "repeats" else f" ({lv.ci.source})") if lv.ci else "—",
                  lv.verdict, _aa_cell(aa.get(lv.level))]
                 + ([", ".join(_invocation(i) for i in lv.invocations) or "—"] if s.invocations > 1 else [])
                 for lv in s.levels]))
    if s.open_loop:
        out.append(open_loop_latency_table(s))
    else:
        out.append(("Latency and goodput", "Goodput: share of all sent requests (failures count) within the SLO.",
                    ["c", f"{b} TTFT p95 ms", f"{b} goodput", f"{b} good req/s", f"{st} TTFT p95 ms",
                     f"{st} goodput", f"{st} good req/s"],
                    [[str(lv.concurrency), fmt(lv.baseline_ttft_p95_ms), _pct(lv.baseline_goodput),
                      fmt(lv.baseline_good_rps, "{:.2f}"), fmt(lv.stack_ttft_p95_ms), _pct(lv.stack_goodput),
                      fmt(lv.stack_good_rps, "{:.2f}")] for lv in s.levels]))
    out += layer_table(s)
    steady = [[_level(lv), side, "; ".join(getattr(lv, f"{key}_not_steady")) or "steady",
               "; ".join(getattr(lv, f"{key}_modes")) or "—"]
              for lv in s.levels for side, key in ((b, "baseline"), (st, "stack"))
              if getattr(lv, f"{key}_not_steady") or getattr(lv, f"{key}_modes")]
    out.append(("Steady state and TTFT modes", "A level is not steady when the two halves of its full-load window "
                "differ in tok/s or TTFT p50 by more than their noise; bimodal TTFT gives the slow share and how "
                "the slow requests cluster in streaks. Levels not listed were steady and unimodal on both sides.",
                [lh, "deployment", "steady?", "TTFT modes"], steady or [["all", "both", "steady", "unimodal"]]))
    rows = cpu_rows(s)
    out.append(("Where the CPU went (cores)", CPU_HOST_NOTE + f" Processes under {MINOR_CORES} cores at every "
                "level are summed as 'other'.", ["deployment", "process", *[lv.level_text for lv in s.levels]],
                rows))
    return out + (audit_tables(s.audit) if s.audit else [])


def open_loop_latency_table(s: CompareSummary) -> tuple[str, str, list[str], list[list[str]]]:
    b, st = side_names(s)
    return ("Latency and goodput", "Open loop: requests were sent at the offered rate whatever the deployment did, "
            "and TTFT and E2E count from each request's scheduled send time, so a deployment that falls behind "
            "shows its queue (no coordinated omission). Scheduled: the rate of the arrivals as drawn (a Poisson "
            "draw is off the offered rate by chance; both deployments got the same one); sent: the rate the client "
            "actually kept. Goodput: share of all sent requests (failures count) within the SLO.",
            ["rate (req/s)", "scheduled req/s", f"{b} sent req/s", f"{b} TTFT p95 ms", f"{b} E2E p95 ms",
             f"{b} goodput", f"{st} sent req/s", f"{st} TTFT p95 ms", f"{st} E2E p95 ms", f"{st} goodput"],
            [[_level(lv), fmt(lv.scheduled_rate), fmt(lv.baseline_achieved_rate), fmt(lv.baseline_ttft_p95_ms),
              fmt(lv.baseline_e2e_p95_ms), _pct(lv.baseline_goodput), fmt(lv.stack_achieved_rate),
              fmt(lv.stack_ttft_p95_ms), fmt(lv.stack_e2e_p95_ms), _pct(lv.stack_goodput)] for lv in s.levels])


def layer_table(s: CompareSummary) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """The layer's own figures per level (mean over repeats), from the metrics its stack declares."""
    run = s.runs.get("stack")
    if run is None or not run.layer_notes:
        return []
    keys = list(run.layer_notes)
    rows = []
    for c in sorted({lv.stats.level for lv in run.levels}):
        here = [lv.server.layer for lv in run.levels if lv.stats.level == c and lv.incomplete is None]
        vals = [[x[k] for x in here if k in x] for k in keys]
        rows.append([f"{c:g}" if run.open_loop else str(c), *[fmt(sum(v) / len(v)) if v else "—" for v in vals]])
    caption = " ".join(f"{k}: {note}." for k, note in run.layer_notes.items())
    return [(f"The layer's own metrics ({s.stack})", caption + " Mean over repeats, from the level's scrapes of the "
             "layer's metric endpoint.", [_level_head(s), *keys], rows)]


MINOR_CORES = 0.05


def _invocation(i: int) -> str:
    return "first run" if i == 0 else f"resume {i}"


def _aa_cell(v: tuple[float | None, float | None, str] | None) -> str:
    if v is None or v[0] is None:
        return "—"
    return f"{v[0]:+.1f}% (±{v[1]:.1f}%)" if v[1] is not None else f"{v[0]:+.1f}%"


def cpu_rows(s: CompareSummary) -> list[list[str]]:
    """Rows: each process of each deployment (minor ones folded into 'other'), its total, the load client;
    columns: levels. Cores = CPU seconds / level window, mean over repeats."""
    rows = []
    for side in ("baseline", "stack"):
        per_level = [getattr(lv, f"{side}_cpu_cores") for lv in s.levels]
        labels = sorted({k for cores in per_level for k in cores})
        major = [k for k in labels if any(c.get(k, 0.0) >= MINOR_CORES for c in per_level)]
        minor = [k for k in labels if k not in major]
        for k in major:
            rows.append([side, k, *[fmt(c.get(k), "{:.2f}") for c in per_level]])
        if minor:
            rows.append([side, f"other ({len(minor)} processes)",
                         *[fmt(sum(c.get(k, 0.0) for k in minor), "{:.2f}") for c in per_level]])
        rows.append([side, "**deployment total**", *[fmt(sum(c.values()) if c else None, "{:.2f}") for c in per_level]])
        rows.append([side, "load client", *[fmt(getattr(lv, f"{side}_client_cores"), "{:.2f}") for lv in s.levels]])
    return rows


def audit_tables(a: AuditResult) -> list[tuple[str, str, list[str], list[list[str]]]]:
    endpoints = [[e.label, e.name, e.url, e.status, str(e.families), str(e.vllm_families),
                  ", ".join(f"{k} {v}" for k, v in list(e.prefixes.items())[:6])] for e in a.endpoints]
    families = [[fa.name, fa.status, fa.found_as or "—", fa.key or ""] for fa in a.families]
    live = [[lbl, "; ".join(f"{k}: {v}" + ("" if f.logs_exist.get(k) else " (missing)") for k, v in f.logs.items())
             or "—", str(len(f.listening) - len(f.non_loopback)), ", ".join(f.non_loopback) or "none"]
            for lbl, f in a.live.items()]
    own = [[name, str(len(fams)), ", ".join(fams)] for name, fams in a.layer_families.items() if fams]
    return [
        ("Observability: metric endpoints", "",
         ["deployment", "endpoint", "url", "HTTP", "families", "vllm:*", "prefixes"], endpoints),
        ("Observability: baseline vllm:* families behind the layer",
         "counts: " + ", ".join(f"{k} {v}" for k, v in sorted(a.counts.items())),
         ["family", "status", "found as", "key family"], families),
        ("Observability: logs and listening ports", "",
         ["deployment", "logs", "ports on loopback", "ports beyond loopback (0.0.0.0, ::, host address)"], live),
        *([("Observability: the layer's own families", "Families on the stack's endpoints that the bare vLLM "
            "baseline does not have and that are not the engine's.", ["endpoint", "families", "names"], own)]
          if own else []),
    ]


def audit_markdown(a: AuditResult, heading: str | None = None) -> list[str]:
    """The audit as Markdown lines; heading: which shape of the stack, when the audit covers several."""
    md = [f"## {heading}", ""] if heading else []
    md += [f"- {n}" for n in a.notes] + [""]
    for name, caption, header, rows in audit_tables(a):
        md += [f"### {name}" if heading else f"## {name}", "", *([caption, ""] if caption else []),
               markdown_table(header, rows), ""]
    return md


def _published(s: CompareSummary) -> list[str]:
    """Whether this run agrees with the published measurement of the same shape (same verdict at its level)."""
    p = s.published
    if p is None:
        return []
    said = f"- {p.source} measured {p.delta_pct:+.1f}% at c={p.concurrency} ({p.verdict}); "
    if getattr(s, "open_loop", False):
        return [said + "this run offered request rates, not concurrencies: no level to hold it to"]
    lv = next((lv for lv in s.levels if lv.concurrency == p.concurrency and lv.delta_pct is not None), None)
    if lv is None:
        return [said + f"this run has no c={p.concurrency} level to hold it to"]
    agrees = "agrees" if lv.verdict == p.verdict else "does not agree"
    return [said + f"this run: {lv.delta_pct:+.1f}% ({lv.verdict}), which {agrees}"]


def _headline(s: CompareSummary) -> list[str]:
    top = s.levels[-1] if s.levels else None
    aa = " (A/A: a second deployment of the same bare vLLM, this host's noise floor)" if s.stack == "vllm" else ""
    lines = [f"- stack **{s.stack}**{aa} (in the request path: {'yes' if s.in_request_path else 'no'}) vs baseline "
             f"**{s.baseline_stack}**; vLLM {s.versions.get('baseline')} / {s.versions.get('stack')} "
             f"({'same version' if s.version_match else 'VERSIONS DIFFER'}); profile `{s.profile}`, "
             f"{s.repeats} repeat(s); status **{s.status}**" + (f"; wall time {s.wall_s:.0f} s" if s.wall_s else "")]
    if s.options:
        lines.append("- stack options: " + ", ".join(f"{k}={v}" for k, v in s.options.items()))
    if top and top.delta_pct is not None:
        lines.append(f"- at {top.level_text}: {s.stack} {top.stack_tok_s:.0f} tok/s vs {top.baseline_tok_s:.0f} "
                     f"({top.delta_pct:+.1f}%, {top.verdict}); goodput {_pct(top.stack_goodput)} vs "
                     f"{_pct(top.baseline_goodput)}; TTFT p95 {fmt(top.stack_ttft_p95_ms)} vs "
                     f"{fmt(top.baseline_ttft_p95_ms)} ms")
    lines += _published(s)
    lines.append("- engine settings applied identically: " + ("yes" if s.settings_match else
                                                              "NO — " + "; ".join(s.settings_mismatches)))
    for label, why in s.failures.items():
        lines.append(f"- **{label} failed**: {why.splitlines()[0]} (what was measured before is kept)")
    if s.invocations > 1:
        lines.append(f"- measured over {s.invocations} invocations (`compare --resume`): the throughput table says "
                     "which one measured each level; the wall time is the last one's")
    lines += [f"- **level stopped early** at {lv.level_text}: {x} (left out of the figures)"
              for lv in s.levels for x in lv.incomplete]
    for label, run in s.runs.items():
        if run.scrape_gaps:
            lines.append(f"- metric scrape gaps ({label}): {run.scrape_gaps} of {run.scrapes} scrapes failed: "
                         + ", ".join(f"{k} {v}" for k, v in run.scrape_gap_reasons.items())
                         + (" (404: an endpoint without /metrics, see the audit's endpoint table)"
                            if "http 404" in run.scrape_gap_reasons else ""))
        if run.exposed_ports:
            lines.append(f"- **{label} listens beyond loopback**: {', '.join(run.exposed_ports)}")
    lines.append(f"- metric scraping: {scrape_policy_text(s.scrape_policy)}, the same for both deployments"
                 + (f"; {s.observer_effect}" if s.observer_effect else ""))
    for label, run in s.runs.items():
        major = {k for lv in s.levels for k, v in getattr(lv, f"{label}_cpu_cores").items() if v >= MINOR_CORES}
        cores = cores_sentence(run.cores, s.host_cores, run.engine_binding, run.sampler_cpu_pct, only=major)
        lines.append(f"- cores ({label}): {cores}")
        lines += [f"- **warning**: {w}" for w in health_warnings(run, f" during {label}")]
    if s.audit:
        lines += [f"- observability: {note}" for note in s.audit.notes]
    return lines


def write_report(s: CompareSummary, out_dir: Path, bullets: list[str] | None = None,
                 extra: list[Table] | None = None) -> Path:
    """bullets: more headline lines (without "- "); extra: more tables after the report's own."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = plots(s, out_dir)
    title = f"layerbench: {s.stack}{f' ({s.shape})' if s.shape else ''} vs {s.baseline_stack} — {s.run_id}"
    headline = [line[2:] for line in _headline(s)] + list(bullets or [])
    path = write_document(out_dir, title, headline, [*tables(s), *(extra or [])], images)
    (out_dir / "summary.json").write_text(json.dumps(s.model_dump(exclude={"runs"}), indent=2, default=str))
    return path


SUMMARY_HEADER = ["stack", "in request path?", "engine version", "delta at highest level", "goodput", "TTFT p95 ms",
                  "vllm:* families visible", "run", "status"]


def _visible(a: AuditResult | None) -> str:
    if not a or not a.families:
        return "—"
    kept = sum(fa.status != "lost" for fa in a.families)
    renamed = a.counts.get("renamed", 0)
    return f"{kept}/{len(a.families)}" + (f" ({renamed} renamed)" if renamed else "")


def _status_cell(e: RunEntry) -> str:
    """Status with its flags, and why a run failed or stopped (first line); '|' would split the table cell."""
    why = (e.reason or "").strip().splitlines()
    text = e.status + (f" — {why[0][:160]}" if why else "")
    return text.replace("|", "\\|")


def all_stacks_rows(entries: list[RunEntry]) -> list[list[str]]:
    """One row per run: compares with their delta, single runs with their own figures, audits with what they
    saw; runs without figures (failed, interrupted, still running, damaged files) with their status."""
    rows = []
    for e in entries:
        if s := e.compare:
            top = next((lv for lv in reversed(s.levels) if lv.delta_pct is not None), None)
            rows.append([s.stack, "yes" if s.in_request_path else "no",
                         s.versions.get("stack", "—") + ("" if s.version_match else " (≠ baseline)"),
                         f"{top.delta_pct:+.1f}% at {top.level_text} ({top.verdict})" if top else "—",
                         _pct(top.stack_goodput) if top else "—", fmt(top.stack_ttft_p95_ms) if top else "—",
                         _visible(s.audit), e.run_id, _status_cell(e)])
        elif d := e.summary:
            rows.append([d.stack, "—", d.engine_version or "—", "— (single run)",
                         _pct(d.last.goodput) if d.last else "—", fmt(d.last.ttft_p95_ms) if d.last else "—", "—",
                         e.run_id, _status_cell(e)])
        else:
            kind = {"compare": "compare", "run": "single run", "audit": "audit"}.get(e.command or "", "?")
            rows.append([e.stack, "—", "—", f"— ({kind})", "—", "—", _visible(e.audit), e.run_id, _status_cell(e)])
    return rows


def write_all_stacks(results: Path, out: Path) -> tuple[Path, list[list[str]], list[str]]:
    """`make report`: reports/summary.md from every run under results/. Returns (its path, the table's rows,
    one line per folder skipped or flagged); a damaged folder is named there and never stops the report."""
    entries, problems = read_results(results)
    rows = all_stacks_rows(entries)
    md = ["# layerbench: all stacks", "",
          markdown_table(SUMMARY_HEADER, rows) if rows else f"No run under {results} could be reported.", ""]
    if problems:
        md += ["## Skipped or damaged", "", "Folders that were skipped, or whose runs are listed above without "
               "some of their figures or with a flagged status:", "", *[f"- {p}" for p in problems], ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md))
    return out, rows, problems
