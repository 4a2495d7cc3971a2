"""The compare report, presentation only: reports/<run-id>/report.md + a self-contained report.html (plots
inline) in the order an adopter decides by: the headline (delta with its interval, goodput, TTFT, capacity at the
SLO, where the latency went), warnings, the decision tables, the plots, then the details (CPU, observability, the
long metric and port lists) and how it was measured. The tables come from harness/reporting/report_tables.py; the
terminal's
short summary from harness/reporting/terminal.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.latency_split import hidden, lagging, split
from harness.analysis.prefix_cache import hit_rates, reused
from harness.load.prompts import NO_TOKENIZER
from harness.load.topology import cores_sentence
from harness.reporting.caveats import Caveat, fold
from harness.reporting.diagnosis import diagnosis_lines, diagnosis_tables
from harness.reporting.document import Document, Table, write_document
from harness.reporting.emulation_report import step_items, step_line, step_table
from harness.reporting.format import fmt, major_processes, markdown_table, scrape_policy_text, share_pct
from harness.reporting.headline import by_level, headline_level, verdict_sentence
from harness.reporting.plots import plots, side_names
from harness.reporting.report_tables import (
    audit_tables,
    capacities,
    capacity_text,
    decision_tables,
    detail_tables,
    slo_text,
)
from harness.reporting.routing import routing_lines, routing_tables
from harness.reporting.run_report import health_items
from harness.schemas import AuditResult, CompareSummary, LevelDelta, level_text

REPORTS_DIR = Path("reports")
LEAD_CHART = "delta.png"  # the throughput delta per level with its interval, coloured by verdict (plots.py)


def audit_markdown(a: AuditResult, heading: str | None = None) -> list[str]:
    """The audit as Markdown lines; heading: which shape of the stack, when the audit covers several."""
    md = [f"## {heading}", ""] if heading else []
    md += [f"- {n}" for n in a.notes] + [""]
    for name, caption, header, rows in audit_tables(a):
        md += [f"### {name}" if heading else f"## {name}", "", *([caption, ""] if caption else []),
               markdown_table(header, rows), ""]
    return md


def audit_gist(a: AuditResult, shape: str | None = None) -> list[str]:
    """The audit in a few lines for the terminal: what survived, what was lost, what listens beyond loopback."""
    head = f"**{a.stack}{f' ({shape})' if shape else ''}**: {a.kept}/{len(a.families)} of the baseline's vllm:* " \
        f"families visible behind the layer (" + ", ".join(f"{v} {k}" for k, v in sorted(a.counts.items())) + ")"
    return [head, *[f"  {n}" for n in a.notes]]


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
    same = lv.verdict == p.verdict or (p.verdict == "within noise" and lv.verdict in ("equivalent", "inconclusive"))
    agrees = "agrees" if same else "does not agree"
    return [said + f"this run: {lv.delta_pct:+.1f}% ({lv.verdict}), which {agrees}"]


def decision(s: CompareSummary) -> list[str]:
    """The headline an adopter reads first (lead), then what was served and where the time went (context): the
    terminal prints both; the report puts the lead chart and the folded warnings between them."""
    return [*lead(s), *context_bullets(s)]


def lead(s: CompareSummary) -> list[str]:
    """The first screen's words: the delta at the headline level with its interval, goodput and TTFT, the verdict
    by level, the diagnosis, and each side's capacity at the SLO."""
    top = headline_level(s)
    b, st = side_names(s)
    lines = []
    if top is not None:
        lines.append(f"**{s.stack}{f' ({s.shape})' if s.shape else ''} at {top.level_text} against bare vLLM "
                     f"{s.versions.get('baseline', '?')}: {verdict_sentence(s, top)}** ({b} → {st}: "
                     f"{fmt(top.baseline_tok_s, '{:,.0f}')} → {fmt(top.stack_tok_s, '{:,.0f}')} output tok/s, "
                     f"goodput {share_pct(top.baseline_goodput)} → {share_pct(top.stack_goodput)}, TTFT p95 "
                     f"{fmt(top.baseline_ttft_p95_ms, '{:,.0f}')} → {fmt(top.stack_ttft_p95_ms, '{:,.0f}')} ms)")
        lines += replay_lines(s, top)
        if (levels := by_level(s)) is not None:
            lines.append(levels)
        if s.rejudged is not None:
            lines.append("judged again without the compare's windows (not stored here): each level's noise is the "
                         "most its stored variance components allow, so these calls are conservative, and the host's "
                         "step check was not done again; changed: " + "; ".join(s.rejudged))
        lines += diagnosis_lines(s)
        lines += routing_lines(s)
    else:
        lines.append(f"**{s.stack}: no level measured on both sides** (status {s.status})")
    caps = capacities(s)
    if caps and s.slo is not None:
        lines.append(f"capacity at {slo_text(s)} among the measured levels: "
                     + "; ".join(f"{name} {capacity_text(caps[label], s.runs[label].status)}" for label, name in
                                 (("stack", st), ("baseline", b)) if label in caps))
    return lines


def replay_lines(s: CompareSummary, top: LevelDelta) -> list[str]:
    """A trace's compare: what was replayed, and each side's prefix-cache hits at the headline level."""
    if not s.replay:
        return []
    hits = [hit_rates(s.runs.get(label)).get(top.level) for label in ("baseline", "stack")]
    b, st = side_names(s)
    at = f" at {top.level_text} (a segment: the trace table has each one's reuse)" if len(s.levels) > 1 else ""
    seen = f"; prefix-cache hits{at} {b} {hits[0]:.0%} → {st} {hits[1]:.0%} (the engines' counters)" \
        if None not in hits else ""
    return [f"replayed: {s.replay}{seen}"]


def context_bullets(s: CompareSummary) -> list[str]:
    """What both sides served and where, the emulated step, what the layer added outside the engine, and how long
    the deployments took to start."""
    lines = [*model_line(s), *target_line(s), *step_line(s), *_where_it_went(s)]
    if (starts := starts_line(s)) is not None:
        lines.append(starts)
    return lines


def starts_line(s: CompareSummary) -> str | None:
    """How long each side's deployments took to answer, pair by pair: a pair's cost is mostly its two starts."""
    names = {"baseline": s.baseline_stack, "stack": s.stack}
    parts = [f"{names.get(side, side)} {', '.join(f'{x:.0f}' for x in xs)} s" for side, xs in s.start_s.items() if xs]
    if not parts:
        return None
    return ("deployments ready in (pair by pair): " + "; ".join(parts) + (
        " (each side's first start cold, its later ones from its own compile cache)"
        if s.deployments == "sequential" else ""))


MODEL_WORDS = {"tiny": "the generated 2-layer random Qwen2, computed on this host's CPU",
               "gpu-like": "the tiny model with an emulated GPU step", "path": "a local model directory",
               "hub": "from the Hugging Face hub, through the HF cache"}


def model_line(s: CompareSummary) -> list[str]:
    """What both sides served, and where: the line that tells a real-model GPU run from a CPU smoke test."""
    m = s.model
    if m is None:  # the reference engine serves no model: only a fallback to 4 characters a token is worth a line
        return [ln for ln in tokenizer_line(s) if NO_TOKENIZER in ln]
    if s.target != "local":
        where = f"on the {'cluster' if s.target == 'k8s' else 'docker host'}'s GPUs"
    elif s.devices and s.gpu_host:
        names = {g["index"]: g["name"] for g in s.gpu_host.get("gpus", [])}
        where = (f"on GPU {', '.join(map(str, s.devices))} ({', '.join(sorted({names.get(d, '?') for d in s.devices}))}"
                 f"), tensor_parallel_size {len(s.devices)}")
    else:
        where = "on this host's CPU (no GPU)"
    why = ""
    if m.source == "gpu-like" and s.target == "local" and not s.devices:
        why = (": this host has no NVIDIA GPU, so the engine's step sleeps for the time a GPU would take and the "
               "CPU stays free for the API server and the layer, as on a GPU host (PROFILE=cpu computes the tiny "
               "model on these cores instead, the layer competing with the engine for them)")
    elif m.source == "tiny" and not s.devices:
        why = (": the engine computes on the same cores as the layer, so the delta overstates what the layer costs "
               "on a GPU host (the default profile emulates a GPU step instead)")
    return [f"served: **{m.text()}** ({MODEL_WORDS[m.source]}) {where}, the same on both sides{why}",
            *tokenizer_line(s)]


def tokenizer_line(s: CompareSummary) -> list[str]:
    """What counted the prompts' lengths, as each side's load recorded it (RunSummary.tokenizer)."""
    notes = sorted({r.tokenizer for r in s.runs.values() if r.tokenizer})
    if not notes:
        return []
    text = f"prompt lengths counted with {' and '.join(notes)}"
    return [f"**{text}**" if NO_TOKENIZER in notes else text]


def target_line(s: CompareSummary) -> list[str]:
    """Where a cluster or docker compare ran: the target, its context, each side's image and node."""
    if s.target == "local" or not s.cluster:
        return []
    c = s.cluster
    where = ", ".join(x for x in (f"context `{c['context']}`" if c.get("context") else "",
                                  f"namespace {c['namespace']}" if c.get("namespace") else "") if x)
    sides = []
    for label in ("baseline", "stack"):
        side = c.get(label) or {}
        nodes = ", ".join(side.get("nodes") or [])
        sides.append(f"{label} {', '.join(side.get('images') or ['?'])}" + (f" on node {nodes}" if nodes else ""))
    pods = c.get("pods") or {}
    counts = "; ".join(f"{label}: " + ", ".join(f"pod {p['pod']} sent {p['sent']} recorded {p['recorded']}"
                                                for p in ps) for label, ps in pods.items() if len(ps) > 1)
    gpus = {label: t for label in ("baseline", "stack") if (t := (c.get(label) or {}).get("gpu_telemetry"))}
    telemetry = ([f"GPU telemetry: {next(iter(gpus.values()))}"] if len(set(gpus.values())) == 1 else
                 ["GPU telemetry: " + "; ".join(f"{label}: {t}" for label, t in gpus.items())] if gpus else [])
    return [f"target: **{s.target}**" + (f" ({where})" if where else "") + "; " + "; ".join(sides)
            + (f"; load pods: {counts}" if counts else ""), *telemetry]


def _where_it_went(s: CompareSummary) -> list[str]:
    rows = [r for r in split(s.runs) if r.stack is not None] if s.runs else []
    if not rows or s.is_aa:
        return []
    if hidden(rows, "stack"):
        return [f"where the latency went: {s.stack} hides the engine's TTFT and E2E histograms, so the time it adds "
                "outside the engine cannot be told apart from the engine's"]
    if lagging(rows, "stack"):
        return [f"where the latency went: the engine's histograms behind {s.stack} counted other requests than the "
                "client in every window (their exporter lags), so the time outside the engine cannot be measured"]
    r = next((r for r in reversed(rows) if r.layer_ttft_ms is not None), None)
    if r is None or r.stack is None or r.baseline is None:
        return []
    return [f"where the latency went at {level_text(r.level, s.open_loop)}: {s.stack} adds "
            f"{fmt(r.layer_ttft_ms, '{:+.0f}')} ms to TTFT and {fmt(r.layer_e2e_ms, '{:+.0f}')} ms to E2E outside the "
            f"engine (client − engine: {fmt(r.stack.outside_ttft_ms, '{:.0f}')} ms behind {s.stack} vs "
            f"{fmt(r.baseline.outside_ttft_ms, '{:.0f}')} ms for the bare API server)"
            + ("; from the repeats whose engine histograms counted the client's requests (the others lagged)"
               if r.stack.count_off else "")]


def warnings(s: CompareSummary) -> list[str]:
    """What could make the figures wrong or incomplete: failures, stopped levels, scrape gaps, exposed ports,
    a client that could not keep up."""
    return [c.text for c in caveats(s)]


def caveats(s: CompareSummary) -> list[Caveat]:
    """warnings(s) with each line's kind, and whether it voids the verdicts (the first screen shows those in full
    and folds the rest)."""
    out = []
    if not s.version_match:
        out.append(Caveat("versions differ", f"**engine versions differ**: {s.versions}", voids=True))
    if not s.settings_match:
        out.append(Caveat("settings differ", "**engine settings differ**: " + "; ".join(s.settings_mismatches),
                          voids=True))
    for label, why in s.failures.items():
        out.append(Caveat("failed", f"**{label} failed**: {why.splitlines()[0]} (what was measured before is kept)",
                          voids=True))
    out += [Caveat("level stopped early", f"**level stopped early** at {lv.level_text}: {x} (left out of the figures)")
            for lv in s.levels for x in lv.incomplete]
    if s.instability is not None and s.instability.unstable:
        out.append(Caveat("unstable", f"**{s.stack} is unstable**: {s.instability.text()}: its mean at a level says "
                          "less than the baseline's"))
    if s.left_out:
        out.append(Caveat("left out", "**levels left out** (this host could not emulate them): " + "; ".join(
            f"{level_text(c, s.open_loop)}: {why}" for c, why in sorted(s.left_out.items()))))
    for label, run in s.runs.items():
        if run.scrape_gaps:
            out.append(Caveat("scrape gap", f"metric scrape gaps ({label}): {run.scrape_gaps} of {run.scrapes} "
                              "scrapes failed" + "".join(f", {k} {v}" for k, v in run.scrape_gap_reasons.items())
                              + (" (404: an endpoint without /metrics, see the audit's endpoint table)"
                                 if "http 404" in run.scrape_gap_reasons else "")))
        if run.exposed_ports:
            out.append(Caveat("socket beyond loopback",
                              f"**{label} listens beyond loopback**: {', '.join(run.exposed_ports)}"))
        out += [Caveat(kind, f"**warning**: {w}") for kind, w in health_items(run, f" during {label}")]
        out += [Caveat("prefix reused", w) for w in reuse_warning(label, run, s.open_loop)]
    return out + [Caveat(kind, text) for kind, text in step_items(s)]


def reuse_warning(label: str, run, open_loop: bool) -> list[str]:
    """One line when the engine served prompt tokens from its prefix cache in a unique-prefix run."""
    if run.shared_prefix or not (found := reused(hit_rates(run))):
        return []
    where = ", ".join(f"{share_pct(v)} at {level_text(c, open_loop)}" for c, v in sorted(found.items()))
    return [f"**unique prefix did not hold** ({label}): the engine served {where} of prompt tokens from its prefix "
            "cache (its own counters; see the prefix-cache table)"]


def context(s: CompareSummary) -> list[str]:
    """What ran, how it was measured and where the cores went."""
    aa = " (A/A: a second deployment of the same bare vLLM, this host's noise floor)" if s.is_aa else ""
    lines = [f"stack **{s.stack}**{aa} (in the request path: {'yes' if s.in_request_path else 'no'}) vs baseline "
             f"**{s.baseline_stack}**; vLLM {s.versions.get('baseline')} / {s.versions.get('stack')} "
             f"({'same version' if s.version_match else 'VERSIONS DIFFER'}); profile `{s.profile}`, "
             f"{s.repeats} repeat(s); status **{s.status}**" + (f"; wall time {s.wall_s:.0f} s" if s.wall_s else "")]
    if s.options:
        lines.append("stack options: " + ", ".join(f"{k}={v}" for k, v in s.options.items()))
    if s.frontend:
        lines.append(f"API server: {s.frontend}")
    lines += [x[2:] for x in _published(s)]
    lines.append("engine settings applied identically: " + ("yes" if s.settings_match else
                                                            "NO — " + "; ".join(s.settings_mismatches)))
    if s.invocations > 1:
        lines.append(f"measured over {s.invocations} invocations (`compare --resume`): the throughput table says "
                     "which one measured each level; the wall time is the last one's")
    lines.append(f"metric scraping: {scrape_policy_text(s.scrape_policy)}, the same for both deployments"
                 + (f"; {s.observer_effect}" if s.observer_effect else ""))
    for label, run in s.runs.items():
        major = major_processes(getattr(lv, f"{label}_cpu_cores") for lv in s.levels)
        cores = cores_sentence(run.cores, s.host_cores, run.engine_binding, run.sampler_cpu_pct, only=major)
        lines.append(f"cores ({label}): {cores}")
    if s.audit:
        lines += [f"observability: {note}" for note in s.audit.notes]
    return lines


@dataclass(frozen=True)
class Samples:
    """Per-request data for figures: TTFT (ms) by side and level (the distribution plot), and a replayed trace's
    (scheduled send, end) by side (the arrivals plot)."""

    ttfts: dict[str, dict[float, list[float]]] | None = None
    lines: dict[str, list[tuple[int, int]]] | None = None


def write_report(s: CompareSummary, out_dir: Path, bullets: list[str] | None = None,
                 extra: list[Table] | None = None, details: list[Table] | None = None,
                 samples: Samples | None = None) -> Path:
    """bullets: more headline lines (without "- "); extra: more decision tables; details: more detail tables;
    samples: per-request data for the figures that need it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = plots(s, out_dir, samples.ttfts if samples else None, samples.lines if samples else None)
    title = f"layerbench: {s.stack}{f' ({s.shape})' if s.shape else ''} vs {s.baseline_stack} — {s.run_id}"
    chart = LEAD_CHART if LEAD_CHART in images else None
    shown, folded = fold(caveats(s))
    path = write_document(out_dir, Document(title, [*lead(s), *shown], [*decision_tables(s), *diagnosis_tables(s),
                                                                        *routing_tables(s), *step_table(s),
                                                                        *(extra or [])],
                                            [i for i in images if i != chart], [*detail_tables(s), *(details or [])],
                                            notes=context(s), chart=chart, folded=folded,
                                            more=[*context_bullets(s), *list(bullets or [])]))
    (out_dir / "summary.json").write_text(json.dumps(s.model_dump(exclude={"runs"}), indent=2, default=str))
    return path
