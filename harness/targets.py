"""Where `run`, `compare` and `audit` deploy: `--target local` (this machine, the commands' own code), `docker`
(docker run command lines for a single GPU host) or `k8s` (a Kubernetes cluster with GPUs). For docker and
k8s the deployment is rendered from manifests/ and checked offline first; `--dry-run` writes what would be
deployed into the run folder and stops there, touching no cluster and no docker daemon."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from harness.errors import LayerbenchError
from harness.profile import LoadProfile

if TYPE_CHECKING:  # the stacks are imported when a target is used, not whenever the command line is
    from stacks.base import Stack
    from stacks.k8s.plan import ClusterSettings

TARGETS = ("local", "docker", "k8s")


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", choices=TARGETS, default="local",
                        help="local: this machine (default); docker: docker run on a GPU host; k8s: a Kubernetes "
                        "cluster with GPUs")
    parser.add_argument("--dry-run", action="store_true",
                        help="write what would be deployed and check it, deploying nothing: the local target's plan "
                        "(results/<run>/plan.json: model and revision, engine build, GPUs, each side's engine "
                        "settings), docker's commands or k8s's validated manifests")
    parser.add_argument("--cluster-config", metavar="FILE", help="with --target docker or k8s: a YAML file of "
                        "cluster settings (namespace, model, images, PVC, GPUs, limits...; see stacks/k8s/plan.py)")


def check_target(args: argparse.Namespace) -> None:
    """Combinations refused before anything is rendered or written."""
    target = getattr(args, "target", "local")
    if getattr(args, "dry_run", False) and getattr(args, "resume", None):
        raise LayerbenchError("--dry-run plans a new run; it cannot be combined with --resume")
    if getattr(args, "cluster_config", None) and target == "local":
        raise LayerbenchError("--cluster-config needs --target docker or --target k8s")
    if target != "local" and getattr(args, "resume", None):
        raise LayerbenchError(f"--resume continues a local compare; it cannot be combined with --target {target}")


def run_target(command: str, args: argparse.Namespace, stack: Stack, profile: LoadProfile, run_id: str,
               repeats: int | None, console: Console) -> int:
    """Render, validate and (unless --dry-run) deploy `command`'s sides on the docker or k8s target; on the local
    target (--dry-run only) write the plan."""
    if args.target == "local":
        return _local_plan(command, args, stack, profile, run_id, repeats, console)
    from stacks.k8s.plan import load_cluster_settings

    settings = load_cluster_settings(args.cluster_config)
    out = Path(args.results_dir) / run_id
    if args.target == "docker":
        return _docker(command, args.dry_run, stack, profile, settings, run_id, repeats, out, console)
    return _k8s(command, args.dry_run, stack, profile, settings, run_id, repeats, out, console)


def _local_plan(command: str, args: argparse.Namespace, stack: Stack, profile: LoadProfile, run_id: str,
                repeats: int | None, console: Console) -> int:
    from harness.dryrun import build_plan, write_plan
    from harness.terminal import plan_lines

    plan = build_plan(command, stack, profile, run_id, repeats)
    path = write_plan(plan, Path(args.results_dir))
    for line in plan_lines(plan):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"dry run: nothing was deployed, downloaded or installed; plan: {path}", highlight=False)
    return 0


def _refuse(what: str, problems: list[str]) -> None:
    if problems:
        raise LayerbenchError(f"{what} did not pass validation ({len(problems)} problem"
                              f"{'s' if len(problems) > 1 else ''}); nothing was written:\n"
                              + "\n".join(f"  {p}" for p in problems))


def _k8s(command: str, dry_run: bool, stack: Stack, profile: LoadProfile, settings: ClusterSettings, run_id: str,
         repeats: int | None, out: Path, console: Console) -> int:
    from stacks.k8s.render import render_plan, write_plan
    from stacks.k8s.validate import plan_problems

    plan = render_plan(stack, profile, settings, run_id, command, repeats)
    _refuse("the rendered manifests", plan_problems(plan, settings.k8s_version))
    paths = write_plan(plan, out / "manifests")
    console.print(f"{command} [bold]{run_id}[/] on k8s (namespace {plan.namespace}): manifests valid "
                  f"(Kubernetes {settings.k8s_version} schemas, CRDs, safety policy)")
    for path in paths:
        console.print(f"  {path}", markup=False, highlight=False)
    if dry_run:
        console.print("dry run: nothing was applied")
        return 0
    from stacks.k8s.runner import run_plan

    return run_plan(plan, settings, out, console) or 0


def _docker(command: str, dry_run: bool, stack: Stack, profile: LoadProfile, settings: ClusterSettings, run_id: str,
            repeats: int | None, out: Path, console: Console) -> int:
    from stacks.k8s.docker import command_problems, render_docker, write_docker

    plan = render_docker(stack, profile, settings, run_id, command, repeats)
    _refuse("the rendered docker commands", command_problems(plan, settings))
    if not dry_run:
        if shutil.which("docker") is None:
            raise LayerbenchError("only --dry-run is available on this host: `docker` is not on PATH (add --dry-run "
                                  "to write the commands; run them on a GPU host with docker)")
        raise LayerbenchError("layerbench does not run the docker target's commands itself yet: add --dry-run and "
                              "run the commands.sh it writes")
    paths = write_docker(plan, settings, f"{command} --stack {stack.kind}", out / "docker")
    console.print(f"{command} [bold]{run_id}[/] on docker: commands written (dry run: nothing was started)")
    for path in paths:
        console.print(f"  {path}", markup=False, highlight=False)
    return 0
