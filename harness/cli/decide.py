"""`layerbench capacity` and `layerbench sweep`: the commands that turn measurements into decisions (how much
load one GPU holds at an SLA, whether an engine setting still helps behind a layer, which part of the layer
costs). Measurement lives in harness.procedures.capacity and harness.procedures.variants, presentation in their
report modules."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.cli import inputs
from harness.cli.common import add_model_arguments, console, prepare, private_network, warn
from harness.errors import LayerbenchError
from harness.measure.run import Output
from harness.procedures.pipeline import failure_reason, open_run, recorded
from harness.profile.schema import EngineSettings
from harness.results import RESULTS_DIR


def _local_only(args: argparse.Namespace, what: str) -> None:
    if getattr(args, "dry_run", False):
        raise LayerbenchError(f"{what} has no dry run: `layerbench compare --dry-run` (make compare ... "
                              "ARGS=--dry-run) shows what its deployments would be")
    if getattr(args, "target", "local") != "local":
        raise LayerbenchError(f"{what} runs on the local target only; for a cluster, measure its Service with "
                              "STACK=endpoint URL=...")


def cmd_capacity(args: argparse.Namespace) -> int:
    from harness.measure.session import baseline_then_stack, sides
    from harness.procedures.capacity import gauge_profile, searcher
    from harness.reporting.capacity_report import write
    from harness.schemas import SLA, CapacitySummary
    p = prepare(args, "capacity")
    profile, cost, stack, run_id = p.profile, p.cost, p.stack, p.run_id
    sla = SLA(ttft_p95_s=args.sla_ttft_p95 or profile.slo.ttft_s, itl_p95_s=args.sla_itl_p95 or profile.slo.itl_p95_s)
    if args.target != "local":
        from harness.cli.targets import run_capacity

        return run_capacity(args, stack, profile, sla, run_id, console)
    _local_only(args, "capacity")
    if args.baseline and stack.baseline() is None:
        raise LayerbenchError(f"stack {args.stack} has no baseline layerbench can deploy: BASELINE=1 needs a stack "
                              "that names its bare vLLM (not endpoint)")
    targets = sides(stack) if args.baseline else [("stack", stack)]
    ceiling = args.max_level or (1000.0 if profile.open_loop else 4 * profile.engine.max_num_seqs)
    run = open_run(p, "capacity", Output.to(console), {
        "profile": profile.model_dump(), "sla": sla.model_dump(), "baseline": args.baseline, "ceiling": ceiling,
        "options": dict(stack.settings.options)}).with_repeats(1)
    writer = run.writer
    console.print(f"capacity [bold]{run_id}[/]: {args.stack}" + (" and its baseline" if args.baseline else "")
                  + f" at {sla.text()} → {writer.dir}")
    summary = CapacitySummary(run_id=run_id, stack=args.stack, shape=stack.shape(), profile=profile.name, sla=sla,
                              scrape_policy=profile.scrape, gauges_polled_apart=gauge_profile(profile) is not None)

    def keep(r) -> None:
        if r.label == "baseline":
            summary.baseline = r
        else:
            summary.capacity = r
        writer.write_json("summary.json", summary.model_dump())

    t0 = time.monotonic()
    measured = None
    with recorded(writer) as outcome:
        measured = baseline_then_stack(targets, run, sweep=searcher(sla, float(ceiling), keep, args.repeats or 1))
        summary.failures = dict(measured.failures)
        summary.versions = {label: side.engine_version for label, side in measured.runs.items()}
        if measured.failures:
            outcome.reason = failure_reason(measured.failures)
    summary.status, summary.wall_s = outcome.status, time.monotonic() - t0
    summary.finish()
    writer.write_json("summary.json", summary.model_dump())
    report = write(summary, Path(args.reports_dir or "reports") / run_id, cost,
                   _kv_tables(measured, {label: t.settings.engine for label, t in targets if t.loads_model},
                              stack.settings.model_path) if measured else [])
    writer.scrub(report.parent)
    console.print(report.read_text(), markup=False, highlight=False)
    console.print(f"report: {report} (+ report.html, capacity.png); results: {writer.dir} (status: {outcome.status})")
    return outcome.exit_code(writer, warn)


def cmd_sweep(args: argparse.Namespace) -> int:
    from harness.measure.session import baseline_then_stack
    from harness.procedures.variants import plan, settle
    from harness.reporting.variants_report import write
    from harness.schemas.sweep import Point, SweepSummary
    from stacks.base import get_stack

    _local_only(args, "sweep")
    if sum(map(bool, (args.setting, args.option, args.shapes))) != 1:
        raise LayerbenchError("sweep needs exactly one of SETTING=key=v1,v2 (an engine setting, on the bare engine "
                              "and behind the layer), OPT=key=v1,v2 (a stack option, each shape against the bare "
                              "engine) or SHAPES=128x128,2048x128 (request shapes, input x output tokens)")
    p = prepare(args, "sweep")
    profile, cost, run_id, settings = p.profile, p.cost, p.run_id, p.stack.settings
    if args.levels:
        profile = profile.with_levels(args.levels)
    profiles = None
    if args.shapes:
        from harness.procedures.shapes import plan_shapes

        kind, key = "shape", "shape"
        values, targets, profiles, labels = plan_shapes(args.shapes, get_stack(args.stack), settings, profile)
        points = [Point(value=v, baseline_label=b, stack_label=s) for v, b, s in labels]
    else:
        kind = "setting" if args.setting else "option"
        key, values, targets, points = plan(kind, args.setting or args.option, get_stack(args.stack), settings)
    private_network([st for _, st in targets])
    repeats = args.repeats or profile.repeats
    p.profile = profile
    run = open_run(p, "sweep", Output.to(console), {
        "kind": kind, "key": key, "values": values, "repeats": repeats, "profile": profile.model_dump(),
        "options": dict(settings.options)}).with_repeats(repeats)
    writer = run.writer
    console.print(f"sweep [bold]{run_id}[/]: {args.stack} by {key} = {', '.join(values)} "
                  f"({len(targets)} deployments, one at a time) → {writer.dir}")
    summary = SweepSummary(run_id=run_id, stack=args.stack, kind=kind, key=key, values=values, profile=profile.name,
                           repeats=repeats, points=points)
    t0 = time.monotonic()
    measured = None

    from harness.procedures.compare import latest_aa, noise_key

    aa = latest_aa(Path(args.results_dir), profile.name, noise_key(targets[-1][1], profile))
    host = aa.components if aa else {}  # one deployment per value: the host's A/A is all the noise it can know

    def keep(m) -> None:
        settle(summary, m.runs, m.failures, profile, host)
        summary.failures = dict(m.failures)
        writer.write_json("summary.json", summary.model_dump())

    with recorded(writer) as outcome:
        measured = baseline_then_stack(targets, run, after_side=keep, profiles=profiles)
        if measured.failures:  # the other points are measured and reported; the exit code still says it
            outcome.reason = failure_reason(measured.failures)
    summary.status, summary.wall_s = outcome.status, time.monotonic() - t0
    if measured is not None:
        keep(measured)
    report = write(summary, Path(args.reports_dir or "reports") / run_id, cost,
                   _kv_tables(measured, {label: t.settings.engine for label, t in targets if t.loads_model},
                              settings.model_path)
                   if measured else [])
    writer.scrub(report.parent)
    console.print(report.read_text(), markup=False, highlight=False)
    console.print(f"report: {report} (+ report.html, sweep.png); results: {writer.dir} (status: {outcome.status})")
    return outcome.exit_code(writer, warn)


def _kv_tables(measured, engines: dict[str, EngineSettings], model_dir: Path) -> list:
    """The KV-cache arithmetic beside each deployment's startup log (engines: label -> its engine settings)."""
    from harness.reporting.kv_report import kv_tables

    return kv_tables([(label, engines[label], run.applied) for label, run in measured.runs.items()
                      if label in engines], model_dir)


def add_parsers(sub, profile_help: str, results_help: str) -> None:
    from harness.cli.targets import add_target_arguments

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--stack", required=True)
        p.add_argument("--profile", help=profile_help)
        p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="stack option (repeatable)")
        p.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
        p.add_argument("--reports-dir", type=inputs.results_dir, default=None, help="default: reports/")
        p.add_argument("--gpu-hourly-usd", type=inputs.positive_float, default=None,
                       help="what one GPU costs per hour: reports add the run's cost and $ per million output tokens "
                       "(default: $GPU_HOURLY_USD)")
        add_target_arguments(p)
        add_model_arguments(p)

    c = sub.add_parser("capacity", help="the highest load that meets a TTFT/ITL p95 SLA, and how it breaks")
    common(c)
    c.add_argument("--url", type=inputs.url, help="server address for --stack endpoint")
    c.add_argument("--sla-ttft-p95", type=inputs.positive_float, help="seconds (default: the profile's slo.ttft_s)")
    c.add_argument("--sla-itl-p95", type=inputs.positive_float,
                   help="seconds (default: the profile's slo.itl_p95_s; unset: ITL is reported, not bounded)")
    c.add_argument("--baseline", action="store_true", help="also search the stack's version-matched bare vLLM")
    c.add_argument("--repeats", type=inputs.positive_int, help="windows per probed level; a level holds only if "
                   "every window held (default 1)")
    c.add_argument("--max-level", type=inputs.positive_float,
                   help="the search's ceiling (default: 4 x max_num_seqs, or 1000 req/s in an open-loop profile)")
    c.set_defaults(func=cmd_capacity)

    w = sub.add_parser("sweep", help="one engine setting (bare and behind the layer), one layer option, or the "
                       "request's shape, swept")
    common(w)
    w.add_argument("--setting", metavar="KEY=V1,V2", help="an engine setting, e.g. max_num_seqs=16,64")
    w.add_argument("--option", metavar="KEY=V1,V2", help="a stack option, e.g. ingress_replicas=1,2,4")
    w.add_argument("--shapes", metavar="IxO,IxO", help="request shapes (input x output tokens), each a bare vLLM "
                   "and the layer, e.g. 128x128,2048x128,128x1024")
    w.add_argument("--levels", type=inputs.positive_floats, metavar="L1,L2",
                   help="the levels to measure instead of the profile's (concurrencies, or rates when open loop)")
    w.add_argument("--repeats", type=inputs.positive_int, help="sweeps per deployment (default: the profile's)")
    w.set_defaults(func=cmd_sweep)
