"""`layerbench diagnose` (make diagnose): the question "why does the layer cost" alone, in a few minutes: a compare
of one deployment pair and one sweep a side, every level profiled after its window, its report led by the
diagnosis. Its verdicts say what one pair can say (no interval); `make compare` is the one that decides."""

from __future__ import annotations

import argparse

from harness.errors import LayerbenchError
from harness.results import RESULTS_DIR


def cmd_diagnose(args: argparse.Namespace) -> int:
    from harness.cli.main import build_parser, cmd_compare
    from stacks.base import Stack, get_stack

    cls = get_stack(args.stack)
    if cls.processes is Stack.processes:
        raise LayerbenchError(f"diagnose: {args.stack} declares no processes of its own to sample (it measures a "
                              "server it did not start); `make compare` measures it without a diagnosis")
    argv = ["compare", "--stack", args.stack, "--pairs", "1", "--repeats", "1", "--cpu-profile",
            "--results-dir", args.results_dir]
    for flag, value in (("--profile", args.profile), ("--reports-dir", args.reports_dir), ("--model", args.model),
                        ("--revision", args.revision), ("--client-procs", args.client_procs)):
        if value:
            argv += [flag, str(value)]
    if args.gpus:
        argv += ["--gpus", ",".join(str(g) for g in args.gpus)]
    for o in args.opt or ():
        argv += ["--opt", o]
    compare = build_parser().parse_args(argv)
    compare.levels, compare.command_name = args.levels, "diagnose"
    return cmd_compare(compare)


def add_parser(sub, profile_help: str, results_help: str) -> None:  # noqa: ANN001 (argparse's subparsers)
    from harness.cli import inputs
    from harness.cli.common import add_model_arguments

    d = sub.add_parser("diagnose", help="why the layer costs, alone: one pair, every level profiled (a few minutes)")
    d.add_argument("--stack", required=True)
    d.add_argument("--profile", help=profile_help)
    d.add_argument("--levels", type=inputs.positive_floats, metavar="L1,L2",
                   help="the levels to profile instead of the profile's (concurrencies, or rates when open loop)")
    d.add_argument("--opt", action="append", metavar="KEY=VALUE", help="stack option (repeatable)")
    d.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
    d.add_argument("--reports-dir", type=inputs.results_dir, default=None, help="default: reports/")
    add_model_arguments(d)
    d.set_defaults(func=cmd_diagnose)
