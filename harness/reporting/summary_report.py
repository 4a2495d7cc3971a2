"""`make report`: the cross-run summary of everything under results/, written to reports/ as summary.csv (every
measured window, harness/reporting/results_frame.py), summary.md + summary.html (one self-contained document) and
summary-delta.png.

This module owns which compare speaks for a stack and how the summary reads: the latest complete compare of each
(stack, shape, profile, engine version) is its current answer; runs of different profiles or engine versions are
never averaged together, nor put on one line of the chart, and a run's figures are means over its own repeats
only (pandas groupby on run, side and level). It also owns the every-run table (all_stacks_rows) and the list of
folders skipped or damaged: a damaged folder is named there and never stops the summary."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from harness.reporting.catalog import RunEntry, read_results
from harness.reporting.document import Document, Table, write_document
from harness.reporting.format import fmt, share_pct
from harness.reporting.results_frame import DELTA_COLUMNS, compare_frame
from harness.reporting.summary_plot import CapacityMark, StackRun, delta_chart, mark_for
from harness.schemas import AuditResult, CapacitySummary, level_text

# What identifies "the same question asked again": a newer compare of these replaces an older one.
LATEST_KEY = ["compared_stack", "shape", "profile", "engine_version"]
SIDE_FIGURES = ["throughput_tok_s", "ttft_p95_ms", "goodput"]
SUMMARY_HEADER = ["stack", "request path", "engine version", "delta at highest level", "goodput", "TTFT p95 ms",
                  "vllm:* families visible", "run", "status"]
LEVEL_HEADER = ["profile", "vLLM", "level", "baseline tok/s", "stack tok/s", "delta", "95% interval", "verdict",
                "TTFT p95 ms baseline", "TTFT p95 ms stack", "goodput baseline", "goodput stack"]


class LatestCompare(StackRun):
    """One stack's current answer for one profile and engine version: its latest complete compare."""

    level_text: str | None = None  # the highest level with a delta
    delta_pct: float | None = None
    ci_lo_pct: float | None = None
    ci_hi_pct: float | None = None
    verdict: str = "missing"
    capacity: str | None = None  # the latest capacity run's answer for the same stack, profile and version

    @property
    def name(self) -> str:
        return self.stack + (f" ({self.shape})" if self.shape else "")

    def delta_text(self) -> str:
        if self.delta_pct is None or self.level_text is None:
            return "no delta"
        ci = "" if self.ci_lo_pct is None else f", 95% interval {self.ci_lo_pct:+.1f}…{self.ci_hi_pct:+.1f}%"
        return f"{self.delta_pct:+.1f}% at {self.level_text} ({self.verdict}{ci})"


class SummaryResult(BaseModel):
    markdown: Path
    html: Path
    csv: Path
    chart: Path | None = None
    rows: list[list[str]]  # the every-run table (SUMMARY_HEADER)
    problems: list[str]  # one line per folder skipped or flagged, naming it
    latest: list[LatestCompare]
    windows: int  # rows of the CSV


def _visible(a: AuditResult | None) -> str:
    if not a or not a.families:
        return "—"
    renamed = a.counts.get("renamed", 0)
    return f"{a.kept}/{len(a.families)}" + (f" ({renamed} renamed)" if renamed else "")


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
            top = s.top
            rows.append([s.stack, "in it" if s.in_request_path else "not in it",
                         s.versions.get("stack", "—") + ("" if s.version_match else " (≠ baseline)"),
                         f"{top.delta_pct:+.1f}% at {top.level_text} ({top.verdict})" if top else "—",
                         share_pct(top.stack_goodput) if top else "—", fmt(top.stack_ttft_p95_ms) if top else "—",
                         _visible(s.audit), e.run_id, _status_cell(e)])
        elif d := e.summary:
            rows.append([d.stack, "—", d.engine_version or "—", "— (single run)",
                         share_pct(d.last.goodput) if d.last else "—", fmt(d.last.ttft_p95_ms) if d.last else "—", "—",
                         e.run_id, _status_cell(e)])
        else:
            kind = {"compare": "compare", "run": "single run", "audit": "audit", "capacity": "capacity",
                    "serve": "served, not measured"}.get(e.command or "", "?")
            rows.append([e.stack, "—", "—", f"— ({kind})", "—", "—", _visible(e.audit), e.run_id, _status_cell(e)])
    return rows


def level_figures(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, level): both sides' means over that run's complete repeats (incomplete windows are
    not a measurement, as in harness.analysis.deltas.level_deltas) beside the compare's own delta and verdict."""
    cols = ["run_id", "level", "open_loop", *DELTA_COLUMNS,
            *[f"{side}_{f}" for f in SIDE_FIGURES for side in ("baseline", "stack")]]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    done = frame[frame["incomplete"].isna()]
    means = done.groupby(["run_id", "level", "side"])[SIDE_FIGURES].mean().unstack("side")
    means.columns = [f"{side}_{figure}" for figure, side in means.columns]
    # the delta is the same on every row of a level: first() only picks it (and skips a side's missing one)
    deltas = frame.groupby(["run_id", "level"])[["open_loop", *DELTA_COLUMNS]].first()
    return deltas.join(means).reset_index().reindex(columns=cols)


def latest_compares(frame: pd.DataFrame) -> pd.DataFrame:
    """The newest complete compare per (stack, shape, profile, engine version of the stack side). Run ids begin
    with their start time (YYYYmmdd-HHMMSS), so the greatest run id is the newest run."""
    key = ["run_id", *LATEST_KEY]
    if frame.empty:
        return pd.DataFrame(columns=key)
    runs = frame[(frame["side"] == "stack") & (frame["compare_status"] == "complete")][key].drop_duplicates()
    return runs.sort_values("run_id").groupby(LATEST_KEY, dropna=False).tail(1).sort_values(
        ["compared_stack", "profile", "run_id"]).reset_index(drop=True)


def _none(v: object) -> object:
    return None if pd.isna(v) else v


def _level_text(level: float, open_loop: bool) -> str:
    return level_text(level if open_loop else int(level), open_loop)


def latest_answers(latest: pd.DataFrame, levels: pd.DataFrame, marks: list[CapacityMark]) -> list[LatestCompare]:
    out = []
    for r in latest.itertuples(index=False):
        mine = levels[(levels["run_id"] == r.run_id) & levels["delta_pct"].notna()].sort_values("level")
        top = mine.iloc[-1] if len(mine) else None
        cap = mark_for(marks, r.compared_stack, _none(r.shape), r.profile, _none(r.engine_version),
                       top is not None and bool(top["open_loop"]))
        out.append(LatestCompare(
            stack=r.compared_stack, shape=_none(r.shape), profile=r.profile, engine_version=_none(r.engine_version),
            run_id=r.run_id, level_text=None if top is None else _level_text(top["level"], bool(top["open_loop"])),
            delta_pct=None if top is None else top["delta_pct"],
            ci_lo_pct=None if top is None else _none(top["ci_lo_pct"]),
            ci_hi_pct=None if top is None else _none(top["ci_hi_pct"]),
            verdict="missing" if top is None else str(top["verdict"]), capacity=cap.text if cap else None))
    return out


def _cell(v: object, pattern: str = "{:.1f}") -> str:
    return "—" if pd.isna(v) else pattern.format(v)


def stack_tables(answers: list[LatestCompare], levels: pd.DataFrame) -> list[Table]:
    """A table per stack (and shape): every level of its latest compare for each profile and engine version."""
    tables = []
    for name in sorted({a.name for a in answers}):
        mine = [a for a in answers if a.name == name]
        rows = []
        for a in mine:
            for lv in levels[levels["run_id"] == a.run_id].sort_values("level").itertuples(index=False):
                interval = "—" if pd.isna(lv.ci_lo_pct) else f"{lv.ci_lo_pct:+.1f}…{lv.ci_hi_pct:+.1f}%"
                rows.append([a.profile, a.engine_version or "—", _level_text(lv.level, bool(lv.open_loop)),
                             _cell(lv.baseline_throughput_tok_s), _cell(lv.stack_throughput_tok_s),
                             _cell(lv.delta_pct, "{:+.1f}%"), interval, _cell(lv.verdict, "{}"),
                             _cell(lv.baseline_ttft_p95_ms), _cell(lv.stack_ttft_p95_ms),
                             _cell(lv.baseline_goodput, "{:.0%}"), _cell(lv.stack_goodput, "{:.0%}")])
        runs = "; ".join(f"`{a.run_id}` ({a.profile}, vLLM {a.engine_version or '?'})" for a in mine)
        tables.append((f"{name}: latest compare per profile", f"tok/s, TTFT and goodput are means over the "
                       f"run's complete repeats; the delta and its interval are the compare's own. Runs: {runs}.",
                       LEVEL_HEADER, rows))
    return tables


def capacity_marks(results: Path, entries: list[RunEntry]) -> tuple[list[CapacityMark], list[str]]:
    """The latest complete capacity run per (stack, profile, engine version), and a line per capacity folder
    whose summary.json cannot be read as one (the catalog lists it as a run, without this reading)."""
    found: dict[tuple[str, str | None, str, str | None], CapacityMark] = {}
    problems = []
    for e in sorted((e for e in entries if e.command == "capacity" and e.status.startswith("complete")),
                    key=lambda e: e.run_id):
        try:
            s = CapacitySummary.model_validate_json((results / e.run_id / "summary.json").read_text())
        except (OSError, ValueError) as why:
            problems.append(f"{results / e.run_id}: summary.json is not a capacity summary this version reads "
                            f"({type(why).__name__}); its capacity is not marked")
            continue
        if s.capacity is not None:
            version = s.versions.get("stack")
            found[(s.stack, s.shape, s.profile, version)] = CapacityMark(
                stack=s.stack, shape=s.shape, profile=s.profile, engine_version=version, run_id=e.run_id,
                kind=s.capacity.kind, value=s.capacity.value, reached=s.capacity.reached)
    return list(found.values()), problems


def _problem_rows(problems: list[str]) -> list[list[str]]:
    """catalog's "folder: what is wrong" as two cells; '|' would split a cell."""
    return [[p.replace("|", "\\|") for p in line.partition(": ")[::2]] for line in problems]


def write_summary(results: Path, out_dir: Path, name: str = "summary") -> SummaryResult:
    """Every run under `results` summarised in `out_dir` (<name>.md, .html, .csv, -delta.png). Never raises for a
    damaged folder: it is named in the result's problems and in the documents' "Skipped or damaged" list."""
    entries, problems = read_results(results)
    frame = compare_frame(entries)
    marks, capacity_problems = capacity_marks(results, entries)
    problems = problems + capacity_problems
    levels = level_figures(frame)
    latest = latest_compares(frame)
    answers = latest_answers(latest, levels, marks)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / f"{name}.csv"
    frame.to_csv(csv, index=False)
    chart = delta_chart(levels, latest, marks, out_dir / f"{name}-delta.png")
    rows = all_stacks_rows(entries)

    runs = f"{len(entries)} run" + ("" if len(entries) == 1 else "s")
    bullets = [f"{runs} under `{results}`, {frame['run_id'].nunique()} of them compares with measured windows "
               f"({len(frame)} rows in `{csv.name}`)"
               + (f"; {len(problems)} folders skipped or flagged (listed at the end)" if problems else "")]
    if answers:
        bullets.append("Each stack's current answer is its latest complete compare per profile and engine version; "
                       "runs of different profiles or engine versions are never averaged together.")
        bullets += [f"**{a.name}** · profile `{a.profile}` · vLLM {a.engine_version or '?'}: {a.delta_text()}"
                    + (f"; capacity {a.capacity}" if a.capacity else "") + f" — run `{a.run_id}`" for a in answers]
    elif rows:
        bullets.append("No complete compare yet: every run is listed below.")
    else:
        bullets.append(f"No run under {results} could be reported.")
    details: list[Table] = []
    if rows:
        details.append(("Every run", "One row per folder under results/, newest last.", SUMMARY_HEADER, rows))
    if problems:
        details.append(("Skipped or damaged", "Folders that were skipped, or whose runs are listed above without "
                        "some of their figures or with a flagged status.", ["folder", "what is wrong"],
                        _problem_rows(problems)))
    md = write_document(out_dir, Document("layerbench: every stack", bullets, stack_tables(answers, levels),
                                          [chart.name] if chart else [], details=details), name=name)
    return SummaryResult(markdown=md, html=md.with_suffix(".html"), csv=csv, chart=chart, rows=rows,
                         problems=problems, latest=answers, windows=len(frame))
