"""Where `run`, `compare` and `audit` deploy: `--target local` (this machine, the commands' own code), `docker`
(docker run command lines for a single GPU host) or `k8s` (a Kubernetes cluster with GPUs). For docker and
k8s the deployment is rendered from manifests/ and checked offline first; `--dry-run` writes what would be
deployed into the run folder and stops there, touching no cluster and no docker daemon."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from harness.errors import LayerbenchError
from harness.profile.schema import LoadProfile

if TYPE_CHECKING:  # the stacks are imported when a target is used, not whenever the command line is
    from harness.targets.k8s.plan import ClusterSettings
    from harness.targets.remote_run import Where
    from stacks.base import Stack

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
                        "cluster settings (namespace, model, images, PVC, GPUs, limits...; "
                        "see harness/targets/k8s/plan.py)")


def check_target(args: argparse.Namespace) -> None:
    """Combinations refused before anything is rendered or written."""
    target = getattr(args, "target", "local")
    if getattr(args, "dry_run", False) and getattr(args, "resume", None):
        raise LayerbenchError("--dry-run plans a new run; it cannot be combined with --resume")
    if getattr(args, "cluster_config", None) and target == "local":
        raise LayerbenchError("--cluster-config needs --target docker or --target k8s")
    if target != "local" and getattr(args, "resume", None):
        raise LayerbenchError(f"--resume continues a local compare; it cannot be combined with --target {target}")


@dataclass(frozen=True)
class TargetRun:
    """A command on the docker or k8s target (or a local dry run): what it runs, as the command line asked."""

    command: str
    args: argparse.Namespace
    stack: Stack
    profile: LoadProfile
    run_id: str
    repeats: int | None


def run_target(req: TargetRun, console: Console) -> int:
    """Render, validate and (unless --dry-run) deploy the command's sides on the docker or k8s target; on the local
    target (--dry-run only) write the plan. A compare ends in its report, as a local one does."""
    if req.args.target == "local":
        return _local_plan(req, console)
    from harness.targets.k8s.plan import load_cluster_settings

    settings = load_cluster_settings(req.args.cluster_config)
    out = Path(req.args.results_dir) / req.run_id
    if req.args.target == "docker":
        return _docker(req, settings, out, console)
    return _k8s(req, settings, out, console)


def _local_plan(req: TargetRun, console: Console) -> int:
    from harness.procedures.dryrun import build_plan, write_plan
    from harness.reporting.terminal import plan_lines

    plan = build_plan(req.command, req.stack, req.profile, req.run_id, req.repeats)
    path = write_plan(plan, Path(req.args.results_dir))
    for line in plan_lines(plan):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"dry run: nothing was deployed, downloaded or installed; plan: {path}", highlight=False)
    return 0


def _refuse(what: str, problems: list[str]) -> None:
    if problems:
        raise LayerbenchError(f"{what} did not pass validation ({len(problems)} problem"
                              f"{'s' if len(problems) > 1 else ''}); nothing was written:\n"
                              + "\n".join(f"  {p}" for p in problems))


def _k8s(req: TargetRun, settings: ClusterSettings, out: Path, console: Console) -> int:
    command, args, stack, profile, run_id, repeats = req.command, req.args, req.stack, req.profile, req.run_id, \
        req.repeats
    from harness.targets.k8s.render import render_plan, write_plan
    from harness.targets.k8s.render_load import LoadCommand
    from harness.targets.k8s.validate import plan_problems
    from harness.targets.remote_run import Where

    def rendered(cs: ClusterSettings):
        p = render_plan(stack, profile, cs, run_id, LoadCommand(command, repeats))
        _refuse("the rendered manifests", plan_problems(p, settings.k8s_version))
        return p, write_plan(p, out / "manifests")

    plan, paths = rendered(settings)
    console.print(f"{command} [bold]{run_id}[/] on k8s (namespace {plan.namespace}): manifests valid "
                  f"(Kubernetes {settings.k8s_version} schemas, CRDs, safety policy); engine: vLLM "
                  f"{plan.engine['version']} ({plan.engine['source']})")
    for path in paths:
        console.print(f"  {path}", markup=False, highlight=False)
    if args.dry_run:
        console.print("dry run: nothing was applied")
        return 0
    from harness.targets.k8s.runner import RunOptions, run_plan

    allow = bool(getattr(args, "allow_version_mismatch", False))
    if command == "compare":
        _plan_compare(req, Where("k8s", (plan.settings or settings).model, (plan.settings or settings).model_revision,
                                 plan.sides[-1].aliases, {"namespace": (plan.settings or settings).namespace}),
                      out, allow)
    return _finish(command, args, out, console, lambda: run_plan(
        plan, settings, out, console, RunOptions(
            allow_version_mismatch=allow,
            rerender=lambda v: rendered(settings.model_copy(update={"vllm_version": v}))[0])))


def _plan_compare(req: TargetRun, where: Where, out: Path, allow: bool) -> None:
    from harness.targets.remote_run import skeleton, write_plan_file

    summary = skeleton(req.stack, req.profile, req.run_id, req.repeats, where)
    write_plan_file(out, summary, req.profile, req.stack.observability_note(), allow)


def _finish(command: str, args: argparse.Namespace, out: Path, console: Console, run) -> int:
    """Runs the target's sides; a compare then ends in its report (also when a side failed or Ctrl-C came:
    what was measured is reported, marked so)."""
    status, error = "complete", None
    try:
        rc = run() or 0
    except KeyboardInterrupt:
        status, rc = "interrupted", 130
        error = "interrupted by the user (Ctrl-C / SIGTERM); what it created was deleted"
    except LayerbenchError as e:
        status, error, rc = "failed", str(e), 2
    from harness.targets.remote_run import conclude, has_results

    if command == "compare" and has_results(out):
        from harness.analysis.cost import price
        from harness.reporting.compare_report import write_compare_report
        from harness.reporting.report import REPORTS_DIR
        from harness.reporting.terminal import compare_summary

        summary = conclude(out, status, error)
        reports = Path(getattr(args, "reports_dir", None) or REPORTS_DIR) / out.name
        profile = LoadProfile.model_validate(json.loads((out / "compare-plan.json").read_text())["profile"])
        report = write_compare_report(summary, profile.engine, out, reports, price(args.gpu_hourly_usd))
        compare_summary(console, summary, report, out, summary.status)
    if status == "failed":
        raise LayerbenchError(error or "failed")
    return rc


def _docker(req: TargetRun, settings: ClusterSettings, out: Path, console: Console) -> int:
    command, args, stack, profile, run_id, repeats = req.command, req.args, req.stack, req.profile, req.run_id, \
        req.repeats
    from harness.targets.k8s.docker import command_problems, docker_answers, render_docker, run_commands, write_docker
    from harness.targets.remote_run import Where

    plan = render_docker(stack, profile, settings, run_id, command, repeats)
    _refuse("the rendered docker commands", command_problems(plan, settings))
    paths = write_docker(plan, settings, f"{command} --stack {stack.kind}", out / "docker")
    if command == "compare":
        _plan_compare(req, Where("docker", plan.settings.model, plan.settings.model_revision, plan.aliases), out,
                      bool(getattr(args, "allow_version_mismatch", False)))
    live = not args.dry_run and docker_answers()
    console.print(f"{command} [bold]{run_id}[/] on docker: commands written"
                  + ("" if live else " (nothing was started)"))
    for path in paths:
        console.print(f"  {path}", markup=False, highlight=False)
    if not live:
        why = "dry run" if args.dry_run else "no docker daemon answers `docker info` here"
        console.print(f"{why}: on the GPU host, run `bash {paths[0]}`, then `make report RUN={run_id}` "
                      "(layerbench render) for the report", highlight=False)
        return 0
    return _finish(command, args, out, console, lambda: run_commands(paths[0], console))


def run_capacity(args: argparse.Namespace, stack: Stack, profile: LoadProfile, sla, run_id: str,
                 console: Console) -> int:
    """`capacity --target k8s`: each side's load Job runs the capacity search itself, against its side's
    Service (one level at a time, as locally), and the sides' results make one capacity report."""
    from harness.targets.k8s.plan import load_cluster_settings
    from harness.targets.k8s.render import render_plan, write_plan
    from harness.targets.k8s.render_load import LoadCommand
    from harness.targets.k8s.runner import run_plan
    from harness.targets.k8s.validate import plan_problems

    if args.target != "k8s":
        raise LayerbenchError(f"capacity runs on the local and k8s targets, not {args.target}")
    settings = load_cluster_settings(args.cluster_config)
    out = Path(args.results_dir) / run_id
    extra = ["--sla-ttft-p95", str(sla.ttft_p95_s), *(["--sla-itl-p95", str(sla.itl_p95_s)] if sla.itl_p95_s else []),
             *(["--max-level", str(args.max_level)] if args.max_level else [])]
    plan = render_plan(stack, profile, settings, run_id, LoadCommand("capacity", args.repeats, tuple(extra)),
                       args.baseline)
    _refuse("the rendered manifests", plan_problems(plan, settings.k8s_version))
    for path in write_plan(plan, out / "manifests"):
        console.print(f"  {path}", markup=False, highlight=False)
    if args.dry_run:
        console.print("dry run: nothing was applied")
        return 0
    rc = _finish("capacity", args, out, console, lambda: run_plan(plan, settings, out, console))
    from harness.analysis.cost import price
    from harness.reporting.capacity_report import write
    from harness.targets.remote_run import conclude_capacity

    summary = conclude_capacity(out, stack.kind, stack.shape(), profile, sla)
    report = write(summary, Path(args.reports_dir or "reports") / run_id, price(args.gpu_hourly_usd))
    console.print(report.read_text(), markup=False, highlight=False)
    return rc


# what a compare's design and export take on the local target alone, as `make` names them
LOCAL_ONLY = (("pairs", "PAIRS="), ("mde", "MDE="), ("budget", "BUDGET="), ("max_pairs", "MAX_PAIRS="),
              ("export", "--export"))


def refuse_pairs_off_local(args: argparse.Namespace) -> None:
    """A cluster or docker compare deploys each side once (harness.targets.k8s.runner, harness.targets.remote_compare):
    it has no pairs to size, stop or export, so asking for them is refused before anything is written, not dropped."""
    target = getattr(args, "target", "local")
    asked = [name for key, name in LOCAL_ONLY if getattr(args, key, None)]
    if target != "local" and asked:
        raise LayerbenchError(
            f"{', '.join(asked)}: the {target} target deploys each side once, so it has no deployment pairs to size, "
            "stop or export, and its report gives the deltas without an interval. Pairs, their plan and "
            "--export run on the local target (`make compare` without TARGET=); drop them here")
