"""`layerbench render RUN_ID` (a compare's report written again from its stored results) and `layerbench stacks`
(every stack with its typed options)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import console
from harness.errors import LayerbenchError
from harness.results import RESULTS_DIR


def cmd_render(args: argparse.Namespace) -> int:
    from harness.analysis.cost import price
    from harness.reporting.compare_report import write_compare_report
    from harness.reporting.rebuild import load_compare, recorded_profile
    from harness.reporting.report import REPORTS_DIR
    from harness.reporting.terminal import compare_summary

    run_dir = Path(args.results_dir) / args.run_id
    if not run_dir.is_dir():
        raise LayerbenchError(f"no run folder {run_dir} (run ids are the folder names under {args.results_dir})")
    if not (run_dir / "compare.json").exists() and (run_dir / "compare-plan.json").exists():
        from harness.targets.remote_run import conclude  # a docker compare whose commands.sh ran by hand

        conclude(run_dir)
    summary = load_compare(run_dir)
    cost = price(args.gpu_hourly_usd)
    profile = recorded_profile(run_dir)
    out = Path(args.out_dir) if args.out_dir else REPORTS_DIR / args.run_id
    report = write_compare_report(summary, profile.engine if profile else None, run_dir, out, cost)
    compare_summary(console, summary, report, run_dir, summary.status)
    return 0


def cmd_stacks(args: argparse.Namespace) -> int:
    from harness.reporting.terminal import stacks_table

    console.print(stacks_table())
    return 0


def add_parsers(sub, results_help: str) -> None:
    from harness.cli import inputs

    r = sub.add_parser("render", help="write a compare's report again from its stored results (nothing deployed)")
    r.add_argument("run_id", metavar="RUN_ID", help="a compare's folder name under --results-dir")
    r.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
    r.add_argument("--out-dir", type=inputs.results_dir, default=None, help="default: reports/RUN_ID")
    r.add_argument("--gpu-hourly-usd", type=inputs.positive_float, default=None,
                   help="what one GPU costs per hour: the report adds the run's cost (default: $GPU_HOURLY_USD)")
    r.set_defaults(func=cmd_render)
    s = sub.add_parser("stacks", help="every stack with its options, their types, defaults and what they set")
    s.set_defaults(func=cmd_stacks)
