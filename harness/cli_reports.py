"""`layerbench render RUN_ID` (a compare's report written again from its stored results) and `layerbench stacks`
(every stack with its typed options)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cliutil import console
from harness.errors import LayerbenchError
from harness.results import RESULTS_DIR


def cmd_render(args: argparse.Namespace) -> int:
    from harness.compare_extras import decision_extras
    from harness.cost import price
    from harness.report import REPORTS_DIR, write_report
    from harness.rerender import load_compare, recorded_profile
    from harness.samples import ttft_samples
    from harness.terminal import compare_summary
    from stacks.base import MODEL_DIR, get_stack

    run_dir = Path(args.results_dir) / args.run_id
    if not run_dir.is_dir():
        raise LayerbenchError(f"no run folder {run_dir} (run ids are the folder names under {args.results_dir})")
    summary = load_compare(run_dir)
    cost = price(args.gpu_hourly_usd)
    profile = recorded_profile(run_dir)
    served = summary.model.path if summary.model is not None and summary.model.path else MODEL_DIR  # as recorded
    model = served if profile is not None and get_stack(summary.stack).loads_model else None
    bullets, extra, details = decision_extras(summary, profile.engine, model, cost) if profile else ([], [], [])
    out = Path(args.out_dir) if args.out_dir else REPORTS_DIR / args.run_id
    report = write_report(summary, out, bullets, extra, details, ttfts=ttft_samples(run_dir, summary.measured_repeats))
    compare_summary(console, summary, report, run_dir, summary.status)
    return 0


def cmd_stacks(args: argparse.Namespace) -> int:
    from harness.terminal import stacks_table

    console.print(stacks_table())
    return 0


def add_parsers(sub, results_help: str) -> None:
    from harness import inputs

    r = sub.add_parser("render", help="write a compare's report again from its stored results (nothing deployed)")
    r.add_argument("run_id", metavar="RUN_ID", help="a compare's folder name under --results-dir")
    r.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
    r.add_argument("--out-dir", type=inputs.results_dir, default=None, help="default: reports/RUN_ID")
    r.add_argument("--gpu-hourly-usd", type=inputs.positive_float, default=None,
                   help="what one GPU costs per hour: the report adds the run's cost (default: $GPU_HOURLY_USD)")
    r.set_defaults(func=cmd_render)
    s = sub.add_parser("stacks", help="every stack with its options, their types, defaults and what they set")
    s.set_defaults(func=cmd_stacks)
