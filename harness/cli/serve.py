"""`layerbench serve` (make serve): a stack, or with --both the compare's two sides, deployed and verified as a
compare does, kept up for the user's own clients until Ctrl-C (harness.procedures.serve)."""

from __future__ import annotations

import argparse

from harness.cli.common import add_model_arguments, console, prepare, warn
from harness.measure.run import Output
from harness.results import RESULTS_DIR


def cmd_serve(args: argparse.Namespace) -> int:
    from harness.procedures.serve import serve

    outcome, writer = serve(prepare(args, "serve"), Output.to(console), args.both, args.allow_version_mismatch)
    return outcome.exit_code(writer, warn)


def add_parser(sub, profile_help: str, results_help: str) -> None:  # noqa: ANN001 (argparse's subparsers)
    from harness.cli import inputs

    sv = sub.add_parser("serve", help="deploy a stack as a compare does and keep it up until Ctrl-C")
    sv.add_argument("--stack", required=True)
    sv.add_argument("--profile", help=profile_help)
    sv.add_argument("--opt", action="append", metavar="KEY=VALUE", help="stack option (repeatable; port=N: its port)")
    sv.add_argument("--both", action="store_true", help="and its version-matched bare vLLM, on ports of its own")
    sv.add_argument("--allow-version-mismatch", action="store_true")
    sv.add_argument("--results-dir", type=inputs.results_dir, default=str(RESULTS_DIR), help=results_help)
    add_model_arguments(sv)
    sv.set_defaults(func=cmd_serve)
