"""`layerbench` command line (the Makefile calls it): run, and the commands later issues add.

Every failure the user can cause or meet becomes one clear message and exit code 2; Ctrl-C (or SIGTERM)
tears the deployment down, keeps what was measured and marks the run interrupted (exit 130)."""

from __future__ import annotations

import argparse
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from harness.errors import LayerbenchError
from harness.profile import LoadProfile, load_profile
from harness.prompts import new_run_id
from harness.results import RESULTS_DIR, RunWriter

# Wide tables stay readable when output goes to a file or CI log instead of a terminal.
console = Console(width=None if sys.stdout.isatty() else 170)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 170)


def _raise_interrupt(signum, frame):  # SIGTERM behaves like Ctrl-C: teardown runs
    raise KeyboardInterrupt


class Outcome:
    """How a command's deployments ended; `recorded` fills it and always marks the run folder."""

    def __init__(self) -> None:
        self.status, self.reason = "failed", None

    def exit_code(self, writer: RunWriter) -> int:
        """130 after Ctrl-C; LayerbenchError (exit 2) when failed; 0 when complete."""
        if self.status == "interrupted":
            err_console.print(f"[yellow]{self.reason}[/]; measured so far is kept in {writer.dir}")
            return 130
        if self.status != "complete":
            raise LayerbenchError(f"{self.reason}\n(run marked {self.status}: {writer.dir}/run.json)")
        return 0


@contextmanager
def recorded(writer: RunWriter):
    """Runs the body; Ctrl-C/SIGTERM and LayerbenchError become the outcome (teardown has already run in the
    body's `with stack`); run.json is marked complete / failed / interrupted whatever happened."""
    out = Outcome()
    try:
        yield out
        if out.status == "failed" and out.reason is None:
            out.status = "complete"
    except KeyboardInterrupt:
        out.status, out.reason = "interrupted", "interrupted by the user (Ctrl-C / SIGTERM); deployments torn down"
    except LayerbenchError as e:
        out.status, out.reason = "failed", str(e)
    finally:
        writer.finish(out.status, out.reason)


def place(profile: LoadProfile) -> dict:
    """Client priority and cores before anything is deployed (deployments inherit neither); for run.json."""
    from harness.placement import apply

    p = apply(profile.client_nice, profile.client_cpus)
    return {**p.model_dump(), "sentence": p.sentence()}


def deploy_and_measure(stack, profile: LoadProfile, writer: RunWriter, label: str, repeats: int | None = None):
    """Deploy (if needed), wait, verify, sweep. The caller owns teardown via the stack's context manager."""
    from harness.sweep import RunSummary, measure

    stack.deploy()
    waited = stack.wait_ready(stack.settings.startup_timeout_s)
    console.print(f"[green]{label}: {stack.kind} ready[/] in {waited:.1f}s at {stack.endpoint().base_url}")
    summary = RunSummary(run_id=writer.run_id, label=label, stack=stack.kind,
                         engine_version=stack.engine_version(), applied=stack.verify_config(),
                         profile=profile.name)
    writer.write_meta(**{label: {**stack.describe(), "engine_version": summary.engine_version,
                                 "applied": summary.applied.model_dump(), "startup_s": round(waited, 1),
                                 "pids": sorted(p.pid for ps in stack.processes().values() for p in ps),
                                 "logs": {k: str(v) for k, v in stack.log_locations().items()}}})
    return measure(stack, profile, writer, summary, console, repeats)


def cmd_run(args: argparse.Namespace) -> int:
    from harness.output import level_table, summary_markdown
    from stacks.base import get_stack

    profile = load_profile(args.profile)
    stack_cls = get_stack(args.stack)
    run_id = new_run_id(args.stack)
    stack = stack_cls(_settings(args, profile, Path(args.results_dir) / run_id / "logs"))  # validates options
    writer = RunWriter(run_id, Path(args.results_dir), meta={
        "command": "run", "stack": args.stack, "profile": profile.model_dump(), "placement": place(profile)})
    console.print(f"run [bold]{run_id}[/] → {writer.dir}")
    summary = None
    with recorded(writer) as outcome:
        with stack:
            summary = deploy_and_measure(stack, profile, writer, label=args.stack, repeats=args.repeats)
    if summary is not None:
        summary.status = outcome.status
        writer.write_json("summary.json", summary.model_dump())
        (writer.dir / "summary.md").write_text(summary_markdown(summary, writer.meta))
        console.print(level_table(summary))
    console.print(f"results: {writer.dir} (status: {outcome.status})")
    return outcome.exit_code(writer)


def _settings(args: argparse.Namespace, profile: LoadProfile, log_dir: Path):
    from stacks.base import DeploySettings

    options = parse_options(getattr(args, "opt", None))
    if getattr(args, "port", None):
        options["port"] = args.port
    return DeploySettings(engine=profile.engine, url=getattr(args, "url", None), log_dir=log_dir, options=options)


def cmd_compare(args: argparse.Namespace) -> int:
    import time

    from harness.compare import latest_aa, observer_effect, run_compare
    from harness.report import REPORTS_DIR, write_report
    from stacks.base import get_stack

    profile = load_profile(args.profile)
    stack_cls = get_stack(args.stack)
    repeats = args.repeats or max(profile.repeats, 2)  # a noise band needs at least two sweeps
    run_id = new_run_id(f"compare-{args.stack}")
    stack = stack_cls(_settings(args, profile, Path(args.results_dir) / run_id / "logs"))  # validates options
    placement = place(profile)
    writer = RunWriter(run_id, Path(args.results_dir), meta={"command": "compare", "stack": args.stack,
                                                            "repeats": repeats, "profile": profile.model_dump(),
                                                            "placement": placement})
    console.print(f"compare [bold]{run_id}[/]: {args.stack} vs its version-matched baseline → {writer.dir}")
    t0 = time.monotonic()
    summary = None
    with recorded(writer) as outcome:
        summary = run_compare(stack, profile, writer, console, repeats, args.allow_version_mismatch,
                              lambda target, label: deploy_and_measure(target, profile, writer, label, repeats))
        if summary.failures:  # the stack died: what it measured is kept and reported
            outcome.reason = "; ".join(f"{k}: {v.splitlines()[0]}" for k, v in summary.failures.items())
    if summary is None:
        return outcome.exit_code(writer)
    summary.wall_s = time.monotonic() - t0
    summary.placement, summary.host_cores = placement["sentence"], placement["host_cores"]
    summary.aa = latest_aa(Path(args.results_dir), profile.name, exclude=run_id)
    summary.observer_effect = observer_effect(profile.scrape)
    writer.write_json("compare.json", summary.model_dump())
    report = write_report(summary, Path(args.reports_dir) / run_id if args.reports_dir else REPORTS_DIR / run_id)
    console.print(report.read_text(), markup=False, highlight=False)
    console.print(f"report: {report} (+ report.html, plots); results: {writer.dir} (status: {outcome.status})")
    return outcome.exit_code(writer)


def cmd_audit(args: argparse.Namespace) -> int:
    """Deploy baseline and stack briefly, send a few requests so request-driven families appear, scrape every
    metric endpoint, and audit what survives; no throughput is measured."""
    from harness.audit import audit_from_scrapes, live_facts, refresh_logs
    from stacks.base import get_stack

    profile = load_profile(args.profile).model_copy(update={
        "concurrency": [2], "requests": 6, "requests_per_concurrency": 0, "min_duration_s": 2.5,
        "warmup_waves": 0, "repeats": 1})
    stack_cls = get_stack(args.stack)
    run_id = new_run_id(f"audit-{args.stack}")
    stack = stack_cls(_settings(args, profile, Path(args.results_dir) / run_id / "logs"))  # validates options
    writer = RunWriter(run_id, Path(args.results_dir), meta={"command": "audit", "stack": args.stack,
                                                            "placement": place(profile)})
    live = {}
    with recorded(writer) as outcome:
        for label, target in (("baseline", stack.baseline() or stack), ("stack", stack)):
            with target:
                deploy_and_measure(target, profile, writer, label, 1)
                live[label] = live_facts(target)
            refresh_logs(live[label], target)
    if outcome.status != "complete":
        return outcome.exit_code(writer)
    from harness.output import markdown_table
    from harness.report import audit_tables
    from harness.results import read_jsonl

    result = audit_from_scrapes(read_jsonl(writer.dir / "scrapes.jsonl"), live, args.stack)
    writer.write_json("audit.json", result.model_dump())
    md = [f"# Observability audit: {args.stack} — {run_id}", ""] + [f"- {n}" for n in result.notes] + [""]
    for name, caption, header, rows in audit_tables(result):
        md += [f"## {name}", "", *([caption, ""] if caption else []), markdown_table(header, rows), ""]
    (writer.dir / "audit.md").write_text("\n".join(md))
    console.print("\n".join(md), markup=False, highlight=False)
    console.print(f"audit: {writer.dir}/audit.md")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from harness.output import markdown_table
    from harness.report import SUMMARY_HEADER, write_all_stacks

    path, rows = write_all_stacks(Path(args.results_dir), Path(args.out))
    console.print(markdown_table(SUMMARY_HEADER, rows), markup=False, highlight=False)
    console.print(f"written: {path} ({len(rows)} runs)")
    return 0


def cmd_bench_harness(args: argparse.Namespace) -> int:
    from harness.bench.run import main as bench_main

    path = bench_main(Path(args.out_dir), console)
    console.print(f"written: {path}")
    return 0


def parse_options(pairs: list[str] | None) -> dict[str, str | int | float | bool]:
    """--opt key=value (repeatable) -> stack options; numbers and booleans are typed."""
    out: dict[str, str | int | float | bool] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise LayerbenchError(f"--opt takes key=value, got {pair!r}")
        value: str | int | float | bool = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    value = cast(raw)
                    break
                except ValueError:
                    continue
        out[key.replace("-", "_")] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="layerbench", description="What does a serving layer cost in front of vLLM?")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="deploy one stack, sweep the profile, tear down")
    r.add_argument("--stack", required=True)
    r.add_argument("--profile", default="quick", help="built-in name (quick, cpu, default) or a YAML path")
    r.add_argument("--url", help="server address for --stack endpoint")
    r.add_argument("--port", type=int, help="port for a locally deployed server (default: a free one)")
    r.add_argument("--repeats", type=int, help="repeat the sweep N times (default: the profile's)")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE", help="stack option (repeatable)")
    r.add_argument("--results-dir", default=str(RESULTS_DIR))
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("compare", help="a stack against its version-matched bare vLLM; writes a report")
    c.add_argument("--stack", required=True)
    c.add_argument("--profile", default="quick")
    c.add_argument("--repeats", type=int, help="sweeps per deployment (default: the profile's, at least 2)")
    c.add_argument("--allow-version-mismatch", action="store_true")
    c.add_argument("--opt", action="append", metavar="KEY=VALUE", help="stack option (repeatable)")
    c.add_argument("--results-dir", default=str(RESULTS_DIR))
    c.add_argument("--reports-dir", default=None, help="default: reports/")
    c.set_defaults(func=cmd_compare)

    a = sub.add_parser("audit", help="which vllm:* metrics survive behind the layer")
    a.add_argument("--stack", required=True)
    a.add_argument("--profile", default="quick", help="engine settings come from here")
    a.add_argument("--url", help="server address for --stack endpoint")
    a.add_argument("--opt", action="append", metavar="KEY=VALUE")
    a.add_argument("--results-dir", default=str(RESULTS_DIR))
    a.set_defaults(func=cmd_audit)

    rp = sub.add_parser("report", help="all-stacks summary table from every run under results/")
    rp.add_argument("--results-dir", default=str(RESULTS_DIR))
    rp.add_argument("--out", default="reports/summary.md")
    rp.set_defaults(func=cmd_report)

    b = sub.add_parser("bench-harness", help="measure layerbench's own accuracy against the reference engine")
    b.add_argument("--out-dir", default="reports/harness")
    b.set_defaults(func=cmd_bench_harness)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # A shell starts background jobs with SIGINT ignored and children inherit that; Ctrl-C must still
    # tear the deployment down, so restore Python's handler (asyncio.run only hooks it when it is default).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return args.func(args)
    except LayerbenchError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False)
        return 2
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
