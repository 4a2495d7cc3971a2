"""`layerbench` command line (the Makefile calls it): run, and the commands later issues add.

Every failure the user can cause or meet becomes one clear message and exit code 2; Ctrl-C (or SIGTERM)
tears the deployment down, keeps what was measured and marks the run interrupted (exit 130)."""

from __future__ import annotations

import argparse
import signal
import sys
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
    from stacks.base import DeploySettings, get_stack

    profile = load_profile(args.profile)
    stack_cls = get_stack(args.stack)
    run_id = new_run_id(args.stack)
    writer = RunWriter(run_id, Path(args.results_dir),
                       meta={"command": "run", "stack": args.stack, "profile": profile.model_dump()})
    options = parse_options(args.opt)
    if args.port:
        options["port"] = args.port
    settings = DeploySettings(engine=profile.engine, url=args.url, log_dir=writer.dir / "logs", options=options)
    console.print(f"run [bold]{run_id}[/] → {writer.dir}")
    summary = None
    status, reason = "failed", None
    try:
        with stack_cls(settings) as stack:
            summary = deploy_and_measure(stack, profile, writer, label=args.stack, repeats=args.repeats)
        status = "complete"
    except KeyboardInterrupt:
        status, reason = "interrupted", "interrupted by the user (Ctrl-C / SIGTERM); deployment torn down"
    except LayerbenchError as e:
        reason = str(e)
    finally:
        writer.finish(status, reason)
        if summary is not None:
            summary.status = status
            writer.write_json("summary.json", summary.model_dump())
            (writer.dir / "summary.md").write_text(summary_markdown(summary, writer.meta))
            console.print(level_table(summary))
    console.print(f"results: {writer.dir} (status: {status})")
    if status == "interrupted":
        err_console.print(f"[yellow]{reason}[/]; measured so far is kept in {writer.dir}")
        return 130
    if status == "failed":
        raise LayerbenchError(f"{reason}\n(run marked failed: {writer.dir}/run.json)")
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
