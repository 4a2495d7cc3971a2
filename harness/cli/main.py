"""`layerbench` command line (the Makefile calls it): run, and the commands later issues add.

Every failure the user can cause or meet becomes one clear message and exit code 2; Ctrl-C (or SIGTERM)
tears the deployment down, keeps what was measured and marks the run interrupted (exit 130)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from rich.markup import escape

from harness.cli.common import (
    add_model_arguments,
    console,
    err_console,
    load_shard,
    prepare,
    profile_for,
    warn,
)
from harness.cli.targets import TargetRun, add_target_arguments, check_target, run_target
from harness.errors import LayerbenchError
from harness.host.busy import MODES, check_host
from harness.measure.run import Output
from harness.procedures.pipeline import failure_reason, open_run, recorded
from harness.profile.loading import load_profile
from harness.results import RESULTS_DIR
from stacks.base import parse_options


def cmd_run(args: argparse.Namespace) -> int:
    p = prepare(args, "run")
    profile, cost, stack, run_id = p.profile, p.cost, p.stack, p.run_id
    if args.target != "local" or args.dry_run:
        return run_target(TargetRun("run", args, stack, profile, run_id, args.repeats), console)
    from harness.measure.run import Side
    from harness.measure.session import deploy_and_measure
    from harness.reporting.run_report import cost_markdown, summary_markdown
    from harness.reporting.terminal import run_summary

    shard, sweep = load_shard(args, profile)
    if shard is not None and shard.index > 0:  # one pod reads the metric endpoints for the side, not every pod
        profile = p.profile = profile.model_copy(update={"scrape": "none"})
    run = open_run(p, "run", Output.to(console), {
        "profile": profile.model_dump(), **({"pod": shard.index, "pods": shard.count} if shard else {}),
        "clock": {"wall_minus_perf_ns": time.time_ns() - time.perf_counter_ns()}}).with_repeats(args.repeats)
    writer = run.writer
    console.print(f"run [bold]{run_id}[/] → {writer.dir}")
    t0 = time.monotonic()
    summary = None
    with recorded(writer) as outcome:
        with stack:
            summary = deploy_and_measure(stack, run, Side(args.stack), sweep)
        if shard is not None and shard.barrier is not None:
            shard.barrier.close()
    partial = writer.dir / "summary.json"
    if summary is None and partial.exists():  # stopped mid-run: what was measured, and why it stopped
        from harness.schemas import RunSummary

        summary = RunSummary.model_validate_json(partial.read_text())
    if summary is not None:
        summary.status = outcome.status
        writer.write_json("summary.json", summary.model_dump())
        (writer.dir / "summary.md").write_text(summary_markdown(summary, writer.meta)
                                               + (cost_markdown(summary, cost, time.monotonic() - t0) if cost else ""))
        writer.scrub()
    run_summary(console, summary, writer.dir, outcome.status)
    return outcome.exit_code(writer, warn)


def cmd_compare(args: argparse.Namespace) -> int:
    results = Path(args.results_dir)
    plan = None
    if args.resume:
        from harness.measure.resume import plan_resume

        plan = plan_resume(results, args.resume, args.stack, load_profile(args.profile) if args.profile else None,
                           parse_options(args.opt), args.repeats)
        args.stack, args.opt = plan.stack, [f"{k}={v}" for k, v in plan.options.items()]
    elif not args.stack:
        raise LayerbenchError("compare needs --stack (or --resume RUN_ID)")
    from harness.cli.targets import refuse_pairs_off_local

    refuse_pairs_off_local(args)
    p = prepare(args, getattr(args, "command_name", "compare"), plan.profile if plan else None,
                plan.run_id if plan else None)
    if getattr(args, "levels", None):  # `diagnose --levels`
        p.profile = p.profile.with_levels(args.levels)
    profile, cost, stack, run_id = p.profile, p.cost, p.stack, p.run_id
    repeats = plan.repeats if plan else args.repeats or profile.repeats
    if profile.deployments == "interleaved":
        from harness.measure.interleave import cannot_interleave

        if args.target != "local":
            raise LayerbenchError("deployments: interleaved runs on the local target only (a cluster's pods are "
                                  "placed by its scheduler); use deployments: sequential")
        if why := cannot_interleave(stack, profile):
            raise LayerbenchError(why)
    if getattr(args, "max_pairs", None) == 1 and args.pairs != 1:
        raise LayerbenchError("MAX_PAIRS=1 contradicts the minimum design: a verdict's interval needs 2 pairs, and a "
                              "sequential compare runs them whatever the budget. PAIRS=1 runs one pair, without a "
                              "verdict")
    from harness.cli.inputs import cpu_profiling

    profiling, not_profiled = cpu_profiling(args.cpu_profile, profile.deployments) \
        if args.target == "local" and not args.dry_run else (False, None)
    pairs_plan = plan_pairs(profile, args, results, profiling or bool(args.dry_run and args.cpu_profile is not False),
                            stack)
    if profile.stopping == "fixed" and profile.pairs == 1 and profile.deployments == "sequential":
        console.print("plan: PAIRS=1: one pair, no verdict possible (an interval of the pair effect needs 2 pairs, "
                      "one in each order); the deltas are reported without one", markup=False, highlight=False)
    if args.target != "local" and args.cpu_profile:  # asked for, it is refused rather than quietly not done
        raise LayerbenchError(f"--cpu-profile: the {args.target} target has no profiled windows yet; they run on "
                              "the local target (`make compare` without TARGET=)")
    if args.target != "local" or args.dry_run:
        return run_target(TargetRun("compare", args, stack, profile, run_id, repeats), console)
    host = check_host(args.busy_host or os.environ.get("LAYERBENCH_BUSY_HOST", "refuse"), warn)  # before deploying
    from harness.procedures.compare import run_compare
    from harness.reporting.report import REPORTS_DIR
    from harness.reporting.terminal import compare_summary

    allow_mismatch = plan.allow_version_mismatch if plan else args.allow_version_mismatch
    run = open_run(p, "compare", Output.to(console), {
        "repeats": repeats, "profile": profile.model_dump(), "options": dict(stack.settings.options),
        "allow_version_mismatch": allow_mismatch, "host_load": host.to_json() if host else None,
        **({"invocations": plan.history} if plan else {})},
        plan).with_repeats(repeats).with_profiling(profiling)
    writer = run.writer
    if not_profiled:
        console.print(f"[yellow]processes not profiled:[/] {not_profiled}", highlight=False)
    verb = f"resume {run.invocation} of" if plan else "compare"
    console.print(f"{verb} [bold]{run_id}[/]: {args.stack} vs its version-matched baseline → {writer.dir}")
    summary = None
    with recorded(writer) as outcome:
        summary = run_compare(stack, run, allow_mismatch, pairs_plan)
        if summary.failures:  # the stack died: what it measured is kept and reported
            outcome.reason = failure_reason(summary.failures)
    if summary is None:
        return outcome.exit_code(writer, warn)
    from harness.reporting.compare_report import write_compare_report

    report = write_compare_report(summary, profile.engine, writer.dir, Path(args.reports_dir or REPORTS_DIR) / run_id,
                                  cost)
    writer.scrub(report.parent)
    compare_summary(console, summary, report, writer.dir, outcome.status)
    export(args, writer.dir, report.parent)
    return outcome.exit_code(writer, warn)


def export(args: argparse.Namespace, run_dir: Path, report_dir: Path) -> None:
    """--export benchmark-report: each side of the compare, level by level, as an llm-d Benchmark Report v0.2.1
    (harness.reporting.benchmark_report), next to the report."""
    if "benchmark-report" in (getattr(args, "export", None) or []):
        from harness.reporting.benchmark_report import export_benchmark_reports

        paths = export_benchmark_reports(run_dir, report_dir / "benchmark-report")
        console.print(f"benchmark reports (llm-d v0.2.1, validated): {len(paths)} in {report_dir / 'benchmark-report'}",
                      highlight=False, soft_wrap=True)


def cmd_audit(args: argparse.Namespace) -> int:
    """Deploy baseline and stack briefly (and the stack's other shapes, such as Triton with its engine metrics
    on), send a few requests so request-driven families appear, scrape every metric endpoint, and audit what
    survives; no throughput is measured."""
    asked = profile_for(args)
    chats = asked.sessions.model_copy(update={"rate": None}) if asked.sessions else None  # closed loop: c=2 chats
    p = prepare(args, "audit", asked.model_copy(update={
        "concurrency": [2], "rates": None, "trace": None, "sessions": chats, "requests": 6,
        "requests_per_concurrency": 0, "min_duration_s": 2.5, "warmup_waves": 0, "repeats": 1}))
    profile, stack, run_id = p.profile, p.stack, p.run_id
    if args.target != "local" or args.dry_run:
        return run_target(TargetRun("audit", args, stack, profile, run_id, None), console)
    from harness.analysis.audit import audit_from_scrapes
    from harness.measure.session import baseline_then_stack
    from harness.reporting.report import audit_gist, audit_markdown
    from harness.reporting.terminal import markup
    from harness.results import read_jsonl

    run = open_run(p, "audit", Output.to(console)).with_repeats(1)
    writer = run.writer
    # a stack without a baseline (an endpoint) is audited against itself: what its own endpoints expose
    targets = [("baseline", stack.baseline() or stack), ("stack", stack), *stack.audit_shapes()]
    md = [f"# Observability audit: {args.stack} — {run_id}", ""]
    seen: list[str] = []
    with recorded(writer) as outcome:
        measured = baseline_then_stack(targets, run, keep_going=False)
        scrapes = read_jsonl(writer.dir / "scrapes.jsonl")
        for label, target in targets[1:]:  # each shape measured, against the same baseline
            if label not in measured.live:
                continue
            mine = [{**s, "label": "stack"} if s.get("label") == label else s for s in scrapes
                    if s.get("label") in ("baseline", label)]
            result = audit_from_scrapes(mine, {"baseline": measured.live["baseline"], "stack": measured.live[label]},
                                        args.stack, target.metric_aliases(), target.observability_note(),
                                        target.metricless_endpoints())
            writer.write_json("audit.json" if label == "stack" else f"audit-{label}.json", result.model_dump())
            md += audit_markdown(result, None if len(targets) == 2 else label)
            seen += audit_gist(result, None if len(targets) == 2 else label)
        if measured.failures:  # what was audited before the failure is written above
            outcome.reason = failure_reason(measured.failures)
    if len(md) > 2:
        (writer.dir / "audit.md").write_text("\n".join(md))
        for line in seen:  # the gist; the families, endpoints and ports are in audit.md
            console.print(markup(line))
        console.print(f"audit: {writer.dir}/audit.md", highlight=False)
    return outcome.exit_code(writer, warn)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.reporting.summary_report import write_summary
    from harness.reporting.terminal import summary_lines

    # --out FILE.md (the earlier interface) puts every file beside it, named after it: FILE.html, FILE.csv, ...
    out_dir, name = (Path(args.out).parent, Path(args.out).stem) if args.out else (Path(args.out_dir), "summary")
    # A damaged folder is named, never fatal: the other runs are still reported and the exit code stays 0.
    for line in summary_lines(write_summary(Path(args.results_dir), out_dir, name), args.results_dir):
        console.print(line, soft_wrap=True)  # a path is copied whole
    return 0


def plan_pairs(profile, args: argparse.Namespace, results: Path, profiling: bool, stack):
    """A local sequential compare's plan (harness.measure.planning), printed; refused, before anything is deployed,
    unless --anyway, when the budget cannot hold one warm pair or cannot reach the target. None: a fixed design."""
    if profile.stopping != "sequential" or profile.deployments != "sequential" or args.target != "local":
        return None
    from harness.measure.planning import check_plan, make_plan
    from harness.procedures.compare import latest_aa, noise_key

    aa = latest_aa(results, profile.name, noise_key(stack, profile), deployments=profile.deployments)
    pairs_plan = make_plan(profile, args.stack, results, aa, profiling)
    for line in pairs_plan.lines():
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    check_plan(pairs_plan, args.anyway)
    return pairs_plan


def cmd_bench_harness(args: argparse.Namespace) -> int:
    from harness.bench.run import SECTIONS, section_named
    from harness.bench.run import main as bench_main

    sections = [section_named(k) for k in args.only] if args.only else SECTIONS
    path = bench_main(Path(args.out_dir), console, sections)
    console.print(f"written: {path}")
    return 0


def _add_compare(sub, profile_help: str, results_help: str) -> None:
    from harness.cli import inputs

    c = sub.add_parser("compare", help="a stack against its version-matched bare vLLM; writes a report")
    c.add_argument("--stack", help="required unless --resume")
    c.add_argument("--profile", help=profile_help)
    c.add_argument("--repeats", type=inputs.positive_int,
                   help="measured sweeps per deployment (default: the profile's, usually 1)")
    c.add_argument("--pairs", type=inputs.pairs, help="exactly this many deployment pairs, baseline and "
                   "stack, in counterbalanced order, with no early stop (PAIRS=; default: the profile's stopping)")
    c.add_argument("--mde", type=inputs.mde, metavar="PCT", help="the throughput effect to detect at every level "
                   "(MDE=3%%; default: the profile's target_mde): the plan sizes the compare for it")
    c.add_argument("--budget", type=inputs.budget, metavar="TIME", help="wall time the compare may take, starts "
                   "included (BUDGET=15m; default: the profile's budget_min)")
    c.add_argument("--max-pairs", type=inputs.max_pairs, metavar="N", help="the most deployment pairs a sequential "
                   "compare deploys (default: the profile's max_pairs)")
    c.add_argument("--anyway", action="store_true", help="run although the plan says the budget cannot reach the "
                   "target detectable effect")
    c.add_argument("--deployments", choices=("sequential", "interleaved"), help="one deployment up at a time, or "
                   "a pair's two up at once with their windows interleaved (DEPLOYMENTS=; default: the profile's)")
    c.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted or failed compare after its last "
                   "complete level; the other options may be left out (they must match when given)")
    c.add_argument("--allow-version-mismatch", action="store_true")
    c.add_argument("--busy-host", choices=MODES, default=None, help="a local compare first probes the host for "
                   "a second: refuse (default) stops on a busy host, warn goes on, go skips it ($LAYERBENCH_BUSY_HOST)")
    c.add_argument("--gpu-hourly-usd", type=inputs.positive_float, default=None,
                   help="what one GPU costs per hour: the report adds the run's cost and $ per million output "
                   "tokens per level (default: $GPU_HOURLY_USD)")
    c.add_argument("--opt", action="append", metavar="KEY=VALUE", help="stack option (repeatable)")
    c.add_argument("--cpu-profile", dest="cpu_profile", action="store_true", default=None,
                   help="sample every process of both sides with py-spy in one more window per level, after the "
                   "judged ones (default: on where py-spy can attach; this flag makes a host where it cannot an "
                   "error)")
    c.add_argument("--no-cpu-profile", "--no-profile", dest="cpu_profile", action="store_false",
                   help="no profiled windows: the compare ends after its judged windows")
    c.add_argument("--export", action="append", choices=("benchmark-report",), help="also write each side, level by "
                   "level, as an llm-d Benchmark Report v0.2.1 under reports/<run>/benchmark-report/")
    c.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
    c.add_argument("--reports-dir", type=inputs.results_dir, default=None, help="default: reports/")
    add_target_arguments(c)
    add_model_arguments(c)
    c.set_defaults(func=cmd_compare)


def build_parser() -> argparse.ArgumentParser:
    from harness.cli import inputs

    p = argparse.ArgumentParser(prog="layerbench", description="What does a serving layer cost in front of vLLM?")
    sub = p.add_subparsers(dest="command", required=True)
    profile_help = "built-in name (quick, cpu, default) or a YAML path (default: quick)"
    results_help = "where run folders go (default: results/)"

    r = sub.add_parser("run", help="deploy one stack, sweep the profile, tear down")
    r.add_argument("--stack", required=True)
    r.add_argument("--profile", help=profile_help)
    r.add_argument("--url", type=inputs.url, help="server address for --stack endpoint")
    r.add_argument("--port", type=inputs.port, help="port for a locally deployed server (default: a free one)")
    r.add_argument("--repeats", type=inputs.positive_int, help="repeat the sweep N times (default: the profile's)")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE", help="stack option (repeatable)")
    r.add_argument("--gpu-hourly-usd", type=inputs.positive_float, default=None,
                   help="what one GPU costs per hour (default: $GPU_HOURLY_USD)")
    r.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
    r.add_argument("--shards", type=inputs.positive_int, help="this process sends its part of each level, one of N "
                   "load processes (the k8s target's load_parallelism)")
    r.add_argument("--shard-index", type=int, help="which part, 0..N-1 (default: $JOB_COMPLETION_INDEX)")
    r.add_argument("--barrier", metavar="HOST:PORT", help="with --shards: where process 0 listens; every level "
                   "starts in all of them at once")
    add_target_arguments(r)
    add_model_arguments(r)
    r.set_defaults(func=cmd_run)

    _add_compare(sub, profile_help, results_help)
    from harness.cli.diagnose import add_parser as add_diagnose

    add_diagnose(sub, profile_help, results_help)

    a = sub.add_parser("audit", help="which vllm:* metrics survive behind the layer")
    a.add_argument("--stack", required=True)
    a.add_argument("--profile", help="engine settings come from here (default: quick)")
    a.add_argument("--url", type=inputs.url, help="server address for --stack endpoint")
    a.add_argument("--opt", action="append", metavar="KEY=VALUE")
    a.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
    add_target_arguments(a)
    add_model_arguments(a)
    a.set_defaults(func=cmd_audit)

    from harness.cli.serve import add_parser as add_serve

    add_serve(sub, profile_help, results_help)

    from harness.cli.decide import add_parsers

    add_parsers(sub, profile_help, results_help)
    from harness.cli.reports import add_parsers as add_report_parsers

    add_report_parsers(sub, results_help)

    rp = sub.add_parser("report", help="cross-run summary of every run under results/: summary.md, .html, .csv "
                        "and the throughput-delta chart")
    rp.add_argument("--results-dir", default=str(RESULTS_DIR))
    rp.add_argument("--out-dir", type=inputs.results_dir, default="reports",
                    help="where summary.md, summary.html, summary.csv and summary-delta.png go (default: reports/)")
    rp.add_argument("--out", type=inputs.output_file, default=None, metavar="FILE.md",
                    help="the Markdown file instead; the other files go beside it, named after it")
    rp.set_defaults(func=cmd_report)

    b = sub.add_parser("bench-harness", help="measure layerbench's own accuracy against the reference engine")
    b.add_argument("--out-dir", type=inputs.results_dir, default="reports/harness")
    b.add_argument("--only", action="append", metavar="SECTION", help="run only this section (repeatable): its "
                   "module's name under harness/bench/, e.g. gpulike (the GPU-like engine's calibration)")
    b.set_defaults(func=cmd_bench_harness)

    sk = sub.add_parser("soak", help="the reference engine at c=64 for a long time with faults on a schedule")
    sk.add_argument("--duration", type=inputs.positive_int, default=600, help="seconds (default 600)")
    sk.add_argument("--concurrency", type=inputs.positive_int, default=64)
    sk.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
    sk.add_argument("--out-dir", type=inputs.results_dir, default="reports/soak")
    sk.set_defaults(func=cmd_soak)
    return p


def cmd_soak(args: argparse.Namespace) -> int:
    from harness.procedures.soak import run_soak

    result, path = run_soak(args.duration, args.concurrency, Path(args.results_dir), Path(args.out_dir), console)
    console.print(path.read_text(), markup=False, highlight=False)
    console.print(f"written: {path}")
    if not result.passed:
        raise LayerbenchError("soak failed: " + "; ".join(result.problems))
    return 0


def main(argv: list[str] | None = None) -> int:
    from harness import signals
    from harness.host import netns

    netns.AS_COMMAND = argv is None  # the program itself: it may run again in a private network namespace
    args = build_parser().parse_args(argv)
    signals.install()
    try:
        check_target(args)
        return args.func(args)
    except LayerbenchError as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)  # "[lo, hi]" is not markup
        return 2
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        return 130
    except OSError as e:  # a full disk, a folder that went away: not a bug, and not worth a traceback
        err_console.print(f"[bold red]error:[/] cannot read or write {escape(str(e.filename or 'a file'))}: "
                          f"{escape(str(e.strerror or e))}", highlight=False)
        return 2
    except Exception as e:  # a bug of ours: one line for the user, the traceback in a file for the report
        return _internal_error(e)


def _internal_error(e: Exception) -> int:
    import tempfile
    import traceback

    with tempfile.NamedTemporaryFile("w", prefix="layerbench-error-", suffix=".txt", delete=False) as f:
        traceback.print_exc(file=f)
    err_console.print(f"[bold red]internal error:[/] {type(e).__name__}: {escape(str(e))} (a layerbench bug; "
                      f"traceback in {f.name})", highlight=False)
    return 3


if __name__ == "__main__":
    sys.exit(main())
