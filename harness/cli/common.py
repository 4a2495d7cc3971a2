"""What every `layerbench` command shares: the consoles, how a command's outcome marks its run folder, the
deployment settings from a profile and `--opt key=value` pairs."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from harness.errors import LayerbenchError
from harness.procedures.pipeline import Prepared
from harness.profile.loading import load_profile
from harness.profile.schema import EngineSettings, LoadProfile

# Wide tables stay readable when output goes to a file or CI log instead of a terminal.
console = Console(width=None if sys.stdout.isatty() else 170)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 170)


def warn(text: str) -> None:
    """A run's outcome the user must see, on stderr (an interrupted run: what was kept)."""
    err_console.print(f"[yellow]{escape(text)}[/]")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --revision, --gpus and --replicas: the profile's engine settings of those names, for once."""
    from harness.cli import inputs

    parser.add_argument("--model", help="what to serve instead of the profile's engine.model: auto, tiny, gpu-like, "
                        "a Hugging Face repo id (org/name) or a local model directory (MODEL=)")
    parser.add_argument("--revision", help="the repo id's branch, tag or commit (REVISION=; default main)")
    parser.add_argument("--gpus", type=inputs.gpu_list, metavar="I,J", help="GPU indices each deployment may use, "
                        "as nvidia-smi numbers them (GPUS=; default: the first tensor_parallel_size visible)")
    parser.add_argument("--replicas", type=int, metavar="N", help="engines per side, the stack fronting them all and "
                        "the load client spreading the bare side's requests over its N (REPLICAS=; default: the "
                        "profile's engine.replicas, 1)")
    parser.add_argument("--client-procs", type=inputs.client_procs, metavar="N|auto", help="load client processes "
                        "per side, a level split between them (CLIENT_PROCS=; default: the profile's, auto)")


def _has_gpu(args: argparse.Namespace) -> bool:
    """Whether the engine will run on NVIDIA GPUs: a cluster or docker target's hosts, or this host's."""
    if getattr(args, "target", "local") != "local":
        return True
    from harness.host.gpus import host_gpus

    return host_gpus() is not None


def engine_python() -> Path:
    """The engine environment's interpreter (the one whose torch times the dtype)."""
    from stacks.base import ENGINE_VENV
    from stacks.base.engine_env import engine_python as python_of

    return python_of(ENGINE_VENV)


def profile_for(args: argparse.Namespace) -> LoadProfile:
    """The profile named on the command line, with `--model`, `--revision` and `--gpus` (MODEL=, REVISION=,
    GPUS=) applied to its engine settings, so run.json records what was served."""
    from harness.host.dtype import resolved_dtype

    profile = load_profile(getattr(args, "profile", None) or "quick")
    if profile.trace is not None and getattr(args, "target", "local") == "local" and not getattr(args, "dry_run", 0):
        check_pace(profile)
    profile = profile.model_copy(update={"engine": profile.engine.on_host(_has_gpu(args))})
    if getattr(args, "pairs", None):
        profile = profile.model_copy(update={"pairs": args.pairs, "stopping": "fixed"})
    for field, arg in (("target_mde", "mde"), ("budget_min", "budget"), ("max_pairs", "max_pairs")):
        if getattr(args, arg, None) is not None:
            profile = profile.model_copy(update={field: getattr(args, arg)})
    if getattr(args, "deployments", None):
        profile = profile.model_copy(update={"deployments": args.deployments})
    if getattr(args, "client_procs", None):
        profile = profile.model_copy(update={"client_procs": args.client_procs})
    update = {k: v for k, v in (("model", getattr(args, "model", None)), ("revision", getattr(args, "revision", None)),
                                ("gpus", getattr(args, "gpus", None)),
                                ("replicas", getattr(args, "replicas", None))) if v is not None}
    if not update:
        return resolved_dtype(profile, engine_python) if _loads_model(args) else profile
    if "model" in update and "revision" not in update:
        update["revision"] = None  # the profile's revision belongs to the profile's model
    if update.get("model") not in (None, "gpu-like"):
        update["step"] = None
    try:
        engine = EngineSettings.model_validate({**profile.engine.model_dump(), **update})
    except ValidationError as e:
        raise LayerbenchError("--model / --revision / --gpus / --replicas: " + "; ".join(
            err["msg"].removeprefix("Value error, ") for err in e.errors())) from None
    profile = profile.model_copy(update={"engine": engine})
    return resolved_dtype(profile, engine_python) if _loads_model(args) else profile


def check_pace(profile: LoadProfile) -> None:
    """Refuses a trace whose busiest second the open-loop pacer cannot hold on this host, as a level off its
    schedule is judged (harness.analysis.stats.schedule_check: more than 5% slower, or later than its bound at p99
    here), from a probe that paces that second with nothing sent (about a second a try)."""
    from harness.analysis.stats import RATE_MARGIN, late_bound_ms
    from harness.load.pacer import probe

    trace = profile.replay()
    busiest = trace.busiest()
    bound = late_bound_ms(len(busiest))
    # the best of three tries: what the host can hold, not one moment's stall (a 49 req/s second ran 72 ms late at
    # p99 once in make test, real vLLM compiling beside it, where it ran 0.6 ms late on an idle host)
    for _ in range(3):
        p99, kept = probe(busiest)
        if p99 <= bound and kept >= 1 - RATE_MARGIN:
            return
    raise LayerbenchError(f"trace {trace.path}: its busiest second ({len(busiest)} requests) is more than this host's "
                          f"pacer holds: with nothing sent it ran {p99:.1f} ms late at p99 (bound {bound:.1f} ms) and "
                          f"kept {kept:.0%} of the rate, in the best of 3 tries; lower time_scale")


def _loads_model(args: argparse.Namespace) -> bool:
    """Whether the command deploys an engine of layerbench's that loads a model, the only one `dtype: fastest`
    is timed for (3-6 s here): not an endpoint or the reference engine."""
    from stacks.base import get_stack

    stack = getattr(args, "stack", None)
    return not stack or get_stack(stack).loads_model


def settings_for(args: argparse.Namespace, profile: LoadProfile, log_dir: Path):
    """Deployment settings for the profile on the chosen target. On the local target the GPUs are chosen and the
    model resolved here, before anything is deployed or written (a dry run resolves without downloading);
    docker and k8s deploy the cluster's model (harness/targets/k8s/plan.py)."""
    from harness.host.gpus import devices_for, host_gpus
    from stacks.base import MODEL_DIR, DeploySettings, get_stack, parse_options
    from stacks.base.engine_model import check_target, resolve

    options = parse_options(getattr(args, "opt", None))
    if getattr(args, "port", None):
        options["port"] = args.port
    target = getattr(args, "target", "local")
    engine = profile.engine
    check_target(engine, target)
    common = {"target": target, "engine": engine, "url": getattr(args, "url", None), "log_dir": log_dir,
              "options": options}
    stack = getattr(args, "stack", None)
    if target != "local" or (stack and not get_stack(stack).loads_model):
        return DeploySettings(**common)  # nothing served from this host's model files (an endpoint, the sims)
    host = host_gpus()
    devices = devices_for(host, engine.gpus, engine.tensor_parallel_size, engine.replicas)
    model = resolve(engine, host, devices, fetch=not getattr(args, "dry_run", False))
    return DeploySettings(**common, model_path=model.path or MODEL_DIR, served_model_name=model.served_name,
                          model=model, devices=devices)


def prepare(args: argparse.Namespace, command: str, profile: LoadProfile | None = None,
            run_id: str | None = None) -> Prepared:
    """Every deploying command's first steps, in one order: the GPU price (a bad one refused before anything), the
    stack's class, the profile, the run id, the deployment settings (the stack's options validated, the GPUs chosen
    and the model resolved) and the stack."""
    from harness.analysis.cost import price
    from harness.results import new_run_id
    from stacks.base import get_stack, parse_options
    from stacks.base.replicas import build_stack, check_replicas

    cost = price(getattr(args, "gpu_hourly_usd", None))
    stack_cls = get_stack(args.stack)  # an unknown stack is refused before the profile's dtype is timed (3 s)
    stack_cls.checked_options(parse_options(getattr(args, "opt", None)))  # and a bad option too
    profile = profile or profile_for(args)
    # before the model is resolved (it may be downloaded) or the GPUs are chosen
    check_replicas(stack_cls, profile.engine.replicas, getattr(args, "target", "local"), {
        **parse_options(getattr(args, "opt", None)), **({"port": args.port} if getattr(args, "port", None) else {})})
    run_id = run_id or new_run_id(args.stack if command == "run" else f"{command}-{args.stack}")
    results = Path(args.results_dir)
    stack = build_stack(stack_cls, settings_for(args, profile, results / run_id / "logs"))
    private_network([stack])
    check_workload(profile, stack.settings.model_path / "tokenizer.json")
    if profile.prefix is not None and profile.prefix.groups < (n := profile.engine.replicas):
        warn(f"{profile.prefix.groups} shared-prefix group{'s' if profile.prefix.groups != 1 else ''} for {n} "
             "replicas: where a group's requests go cannot change what is cached, so routing cannot matter here "
             f"(prefix.groups above {n} lets it)")
    return Prepared(profile=profile, stack=stack, run_id=run_id, results=results, cost=cost, name=args.stack)


def private_network(stacks: list) -> None:
    """Before anything is deployed or written: a deployment that binds beyond loopback (Stack.private_network)
    runs the whole command again in a private network namespace; this returns only inside one."""
    from harness.host import netns

    if why := next((w for st in stacks if (w := st.private_network())), None):
        netns.enter(why)


def check_workload(profile: LoadProfile, tokenizer: Path) -> None:
    """A dataset read and its requests counted before anything is deployed: a file missing, empty, in an unknown
    layout or with no request inside max_model_len is refused here with its reason (LayerbenchError)."""
    if profile.dataset is None:
        return
    from harness.load.datasets import load_dataset
    from harness.load.prompts import PromptGenerator

    gen = PromptGenerator.for_profile("check", "", profile, tokenizer if tokenizer.exists() else None)
    d = load_dataset(profile.dataset, gen.count_tokens, profile.engine.max_model_len, gen.longest_output(),
                     str(tokenizer) if tokenizer.exists() else "chars")
    console.print(f"dataset {profile.dataset}: {len(d.entries):,} requests ({d.layout})"
                  + (f"; {d.skipped:,} longer than max_model_len {profile.engine.max_model_len} skipped"
                     if d.skipped else "")
                  + (f"; {d.malformed:,} records without a prompt and an answer skipped" if d.malformed else ""))


def load_shard(args: argparse.Namespace, profile):
    """(this load process's Shard, the sweep that runs it) for `run --shards N` (one of N load pods of a side:
    the index from --shard-index, or an Indexed Job's JOB_COMPLETION_INDEX), else (None, the usual sweep)."""
    from harness.load.barrier import Barrier, Shard
    from harness.measure.sweep import measure

    count = getattr(args, "shards", None) or 1
    if count == 1:
        return None, measure
    index = args.shard_index if args.shard_index is not None else int(os.environ.get("JOB_COMPLETION_INDEX", "-1"))
    if not 0 <= index < count:
        raise LayerbenchError(f"--shards {count} needs --shard-index 0..{count - 1} (or JOB_COMPLETION_INDEX)")
    if not args.barrier:
        raise LayerbenchError("--shards needs --barrier HOST:PORT, where load process 0 listens")
    shard = Shard(index, count, Barrier(index, count, args.barrier))
    shard.check(profile.levels(), profile.open_loop)
    from harness.measure.run import Windows

    def sharded(stack, run, summary, at=None):  # noqa: ANN001, ANN202  (harness.measure.session.SweepFn)
        return measure(stack, run, summary, replace(at or Windows(), shard=shard))

    return shard, sharded
