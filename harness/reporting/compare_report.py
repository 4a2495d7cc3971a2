"""What a compare report adds for decisions: what the run and each level's tokens cost at a GPU price, and the
KV-cache arithmetic beside the engine's startup log. Presentation only; the caller decides whether the
deployment loads a model whose config.json can be read."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.cost import Price, usd
from harness.profile.schema import EngineSettings
from harness.reporting.document import Table
from harness.reporting.format import fmt
from harness.schemas import CompareSummary


def cost_bullet(s: CompareSummary, price: Price) -> str:
    top = next((lv for lv in reversed(s.levels) if lv.stack_tok_s and lv.baseline_tok_s), None)
    at = (f"; at the highest level {usd(price.usd_per_mtok(top.baseline_tok_s))} vs "
          f"{usd(price.usd_per_mtok(top.stack_tok_s))} per million output tokens ({s.baseline_stack} vs {s.stack})"
          if top else "")
    return f"cost at {price.text()}: this run {usd(price.run_usd(s.wall_s or 0.0))}{at}"


def cost_table(s: CompareSummary, price: Price) -> Table:
    rows = []
    for lv in s.levels:
        rate = getattr(lv, "rate", None)
        b, st = price.usd_per_mtok(lv.baseline_tok_s), price.usd_per_mtok(lv.stack_tok_s)
        more = f"{100 * (st / b - 1):+.0f}%" if b and st else "—"
        rows.append([f"{rate:g} req/s" if rate is not None else str(lv.concurrency), fmt(lv.baseline_tok_s, "{:.0f}"),
                     usd(b), fmt(lv.stack_tok_s, "{:.0f}"), usd(st), more])
    return (f"Cost per million output tokens at {price.text()}", "One GPU serving at each level's measured "
            "throughput: hourly price ÷ (tok/s × 3600) × 10⁶. The layer's cost in money is the last column.",
            ["level", f"{s.baseline_stack} tok/s", f"{s.baseline_stack} $ / M tok", f"{s.stack} tok/s",
             f"{s.stack} $ / M tok", "stack pays"], rows)


def decision_extras(s: CompareSummary, engine: EngineSettings, model_path: Path | None, cost: Price | None,
                    contexts: list[tuple[str, int]] = ()) -> tuple[list[str], list[Table], list[Table]]:
    """The compare report's cost (with a GPU price: a headline bullet and a decision table) and KV-cache
    arithmetic (model_path: where the stack loads the model from; None for one that loads none: a detail table;
    contexts: the workload's p50 and p99 contexts)."""
    from harness.reporting.kv_report import kv_tables

    bullets, tables = ([cost_bullet(s, cost)], [cost_table(s, cost)]) if cost else ([], [])
    details = kv_tables([(label, engine, applied) for label, applied in s.applied.items()], model_path,
                        contexts) if model_path is not None else []
    return bullets, tables, details


def write_compare_report(s: CompareSummary, engine: EngineSettings | None, run_dir: Path, out_dir: Path,
                         cost: Price | None) -> Path:
    """The compare's report into out_dir from its summary and run folder: what `compare` writes at its end and
    `render` writes again (and what a cluster's compare writes once its sides are unpacked)."""
    from harness.analysis.lengths import contexts
    from harness.analysis.prefix_cache import hit_rates
    from harness.analysis.samples import replay_sides, timelines, ttft_samples
    from harness.profile.schema import LoadProfile
    from harness.reporting.flames import write_flames
    from harness.reporting.report import Samples, write_report
    from harness.reporting.workload_report import lengths_table, minutes_table, run_profile, trace_table, turns_table
    from stacks.base import MODEL_DIR, get_stack

    loads = s.target == "local" and get_stack(s.stack).loads_model  # a cluster's model files are not here
    model = (s.model.path if s.model is not None and s.model.path else MODEL_DIR) if loads else None
    bullets, extra, details = decision_extras(s, engine, model, cost, contexts(run_dir, s.measured_repeats)) \
        if engine is not None else ([], [], [])
    recorded = run_profile(run_dir)
    try:
        profile = LoadProfile.model_validate(recorded) if recorded else None
    except ValueError:  # a run folder from an older layerbench: its profile had other fields
        profile = None
    shape = profile.shape_text() if profile else "as recorded"
    hits = {label: hit_rates(s.runs.get(label)) for label in ("baseline", "stack")}
    sides = replay_sides(run_dir, s.measured_repeats) if profile is not None and profile.trace is not None else None
    lengths = trace_table(profile, hits, sides) + minutes_table(profile, run_dir, s.measured_repeats) \
        + lengths_table(run_dir, s.measured_repeats, shape) + turns_table(run_dir, s.measured_repeats)
    varied = profile is not None and (profile.sessions is not None or profile.trace is not None or not (isinstance(
        profile.input_tokens, int) and isinstance(profile.output_tokens, int)))  # part of the decision then
    extra, details = (extra + lengths, details) if varied else (extra, details + lengths)
    if flames := write_flames(s.runs, run_dir, out_dir, bool(profile and profile.open_loop)):
        details.append(("Flame graphs (the profiled windows)", "Each side's processes sampled by py-spy in the "
                        "window after the judged ones; a tower per process, width its share of the samples.",
                        ["side", "level", "file", "samples"], flames))
    lines = timelines(run_dir, profile.replay().offsets_ns(), s.measured_repeats) \
        if profile is not None and profile.trace is not None else None
    return write_report(s, out_dir, bullets, extra, details,
                        Samples(ttft_samples(run_dir, s.measured_repeats), lines))
