"""What the terminal shows at the end of a command, presentation only: a short rich summary (the headline, the
delta table with coloured verdicts, the warnings, where the report is), never the whole report; and the
`layerbench stacks` listing from each stack's typed options."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from harness.reporting.format import fmt, share_pct
from harness.reporting.headline import estimate_text
from harness.reporting.plots import side_names
from harness.reporting.report import decision, warnings
from harness.reporting.run_report import health_warnings, level_table
from harness.reporting.summary_report import SummaryResult
from harness.schemas import CompareSummary, RunSummary

VERDICT_STYLE = {"overhead": "bold red", "gain": "bold green", "mixed": "bold yellow", "equivalent": "green",
                 "inconclusive": "dim",
                 "within noise": "dim", "no interval": "yellow", "host-bound": "yellow", "unchecked": "yellow",
                 "client-bound": "yellow", "missing": "yellow"}
_BOLD = re.compile(r"\*\*(.+?)\*\*")


def markup(text: str) -> Text:
    """A report line for the terminal: Markdown's **bold** as bold, `code` as plain text."""
    out = Text()
    pos = 0
    for m in _BOLD.finditer(text):
        out.append(text[pos:m.start()].replace("`", ""))
        out.append(m[1].replace("`", ""), style="bold")
        pos = m.end()
    out.append(text[pos:].replace("`", ""))
    return out


def delta_table(s: CompareSummary) -> Table:
    """Per level, each endpoint's two sides, its own estimate and 95% interval and its own verdict, then the
    level's."""
    b, st = side_names(s)
    t = Table(title=f"verdicts by level ({s.pairs} deployment pair(s); output tok/s, mean over the pairs; each "
                    "endpoint's change and 95% interval beside its own verdict)", title_justify="left", show_edge=False)
    for col in ("level", f"tok/s {b} / {st}", "throughput", "", f"TTFT p95 ms {b} / {st}", "TTFT p95", "",
                "goodput", "goodput Δ", "", "level"):
        t.add_column(col, justify="left" if col in ("level", "") else "right")

    def call(key: str, lv) -> Text:
        v = lv.endpoints.get(key)
        return Text(v.verdict, style=VERDICT_STYLE.get(v.verdict, "")) if v else Text("—")

    for lv in s.levels:
        t.add_row(lv.level_text, f"{fmt(lv.baseline_tok_s, '{:.0f}')} / {fmt(lv.stack_tok_s, '{:.0f}')}",
                  estimate_text("throughput", lv), call("throughput", lv),
                  f"{fmt(lv.baseline_ttft_p95_ms, '{:.0f}')} / {fmt(lv.stack_ttft_p95_ms, '{:.0f}')}",
                  estimate_text("ttft_p95", lv), call("ttft_p95", lv),
                  f"{share_pct(lv.baseline_goodput)} / {share_pct(lv.stack_goodput)}",
                  estimate_text("goodput", lv), call("goodput", lv),
                  Text(lv.verdict + (f" ({lv.why})" if lv.why and lv.judged else ""),
                       style=VERDICT_STYLE.get(lv.verdict, "")))
    return t


def compare_summary(console: Console, s: CompareSummary, report: Path, results: Path, status: str) -> None:
    head = [markup(line) for line in decision(s)]
    warn = [markup("⚠ " + line) for line in warnings(s)]
    console.print(Panel(Group(*head), title=f"{s.stack} vs {s.baseline_stack} — {s.run_id}", title_align="left",
                        border_style="cyan"))
    console.print(delta_table(s))
    for line in warn:
        line.stylize("yellow")
        console.print(line)
    console.print(f"report: {report} (+ {report.with_suffix('.html').name}: one file, plots inline); "
                  f"results: {results} (status: {status})", highlight=False)


def run_summary(console: Console, summary: RunSummary | None, results: Path, status: str) -> None:
    """The end of `layerbench run`: the level table and its warnings (when anything was measured), then where the
    results are."""
    if summary is not None:
        console.print(level_table(summary))
        for w in health_warnings(summary):
            console.print(f"⚠ {w}", style="yellow", markup=False, highlight=False)
        console.print(f"summary: {results / 'summary.md'}", highlight=False)
    console.print(f"results: {results} (status: {status})")


def stacks_table() -> Table:
    """Each registered stack with one line of description and its typed `--opt` options."""
    from stacks.base import REGISTRY, get_stack

    get_stack("vllm")  # importing the package registers every adapter
    t = Table(title="stacks (--stack NAME, options with --opt KEY=VALUE)", title_justify="left")
    t.add_column("stack", style="bold")
    t.add_column("what it deploys")
    t.add_column("option")
    t.add_column("type")
    t.add_column("default")
    t.add_column("what it sets")
    for kind in sorted(REGISTRY):
        cls = REGISTRY[kind]
        fields = cls.Options.model_fields
        replaces = getattr(cls, "replaces_frontend", "")  # a layer that runs the engine in a server of its own
        what = cls.description + (f"; it replaces {replaces}" if replaces else "")
        if not fields:
            t.add_row(kind, what, "—", "", "", "", end_section=True)
            continue
        for i, (name, f) in enumerate(fields.items()):
            t.add_row(kind if i == 0 else "", what if i == 0 else "", name, type_name(f.annotation),
                      "(required)" if f.is_required() else repr(f.default), f.description or "",
                      end_section=i == len(fields) - 1)
    return t


def type_name(annotation: object) -> str:
    """`int | None` -> `int or none`, `Literal['a', 'b']` -> `a | b`."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in typing.get_args(annotation))
    if origin is not None and typing.get_args(annotation):
        return " or ".join(type_name(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "none"
    return getattr(annotation, "__name__", str(annotation))


def summary_lines(r: SummaryResult, results: str) -> list[RenderableType]:
    """`make report` in the terminal: the latest compare per stack, what was skipped, where the files are."""
    out: list[RenderableType] = []
    if r.latest:
        t = Table(title="latest complete compare per stack, profile and engine version", title_justify="left")
        for col in ("stack", "profile", "vLLM", "delta at the highest level", "run"):
            t.add_column(col, overflow="fold")
        for a in r.latest:
            # Text, not markup: a stack, profile or run name with [brackets] is shown as it is
            t.add_row(*map(Text, (a.name, a.profile, a.engine_version or "?")),
                      Text(a.delta_text(), style=VERDICT_STYLE.get(a.verdict, "")), Text(a.run_id))
        out.append(t)
    elif r.rows:
        out.append(Text(f"no complete compare under {results} yet; every run is listed in {r.markdown}", "yellow"))
    if r.problems:
        out.append(Text(f"skipped or damaged ({len(r.problems)}):", "yellow"))
        out += [Text(f"  {line}", "yellow") for line in r.problems]
    if not r.rows:
        out.append(Text(f"no run could be reported: every folder under {results} is damaged or not a run (listed "
                        "above)" if r.problems else f"no runs under {results} yet", "yellow"))
    out.append(Text(f"written ({len(r.rows)} runs" + (f", {len(r.problems)} folders skipped or flagged)"
                                                      if r.problems else ")") + ":"))
    out += [Text(f"  {path}") for path in (r.markdown, r.html, r.csv, *([r.chart] if r.chart else []))]
    return out


def plan_lines(plan: dict) -> list[str]:
    """A local dry run's plan (harness/procedures/dryrun.py), a line per fact."""
    host, model, build = plan["host"], plan["model"], plan["engine_build"]
    gpus = (f"{host['count']} GPU(s): {host['model']}; driver {host['driver']}, CUDA {host['cuda'] or '?'}"
            + (f"; CUDA_VISIBLE_DEVICES={host['cuda_visible_devices']}" if host.get("cuda_visible_devices") else "")
            if host["count"] else f"no GPU ({host.get('why', '')})")
    lines = [f"plan {plan['run_id']}: {plan['command']} {plan['stack']} on the local target, profile "
             f"{plan['profile']}, levels {', '.join(f'{x:g}' for x in plan['levels'])}"
             + (f"; {plan['pairs']} deployment pairs in the order {plan['order']} ({plan['deployments']} "
                + ("deployments, a pair's two up at once, their windows interleaved)"
                   if plan.get("design") == "interleaved" else "deployments, one at a time)")
                if plan.get("pairs") and not plan.get("sequential") else "")
             + (f"; pairs in the order {plan['order']} …, one deployment at a time, until every level is "
                f"decided (at most {plan['pairs']})" if plan.get("sequential") else ""), f"  host: {gpus}"]
    if model:
        rev = model["revision"] or (f"{model['requested_revision']} (resolved when fetched)"
                                    if model["requested_revision"] else "—")
        lines.append(f"  model: {model['id']} ({model['source']}), revision {rev}, served as "
                     f"{model['served_name']!r}" + (f", config {model['config_digest']}" if model["config_digest"]
                                                    else ""))
        lines.append(f"    {model.get('note') or 'files: ' + str(model['path'])}")
    lines.append(f"  engine build: {build['package']} {build['version']} ({build['variant']}): {build['why']}")
    lines.append(f"    pip install {' '.join(build['pip_args'])}")
    lines.append(f"    installed now: {build['installed'] or 'not set up (make compare installs it first)'}"
                 + (f"; {build['installed_mismatch']}" if build.get("installed_mismatch") else ""))
    for side in plan["sides"]:
        e = side["engine"]
        where = f"GPUs {','.join(map(str, side['gpus']))}" if side["gpus"] else "CPU"
        lines.append(f"  {side['label']}: {side['stack']}" + (f" ({side['shape']})" if side["shape"] else "")
                     + (f", {where}, tensor_parallel_size {side['tensor_parallel_size']}" if e else ", no engine"))
        if e:
            lines.append("    " + ", ".join(f"{k}={v}" for k, v in sorted(e.items()) if k not in ("devices",)))
    lines.append("  engine settings: " + ("identical on both sides" if plan["settings_equal"] and
                                          len(plan["sides"]) > 1 else "one deployment" if plan["settings_equal"]
                                          else "DIFFER: " + "; ".join(plan["differences"])))
    return lines
