"""The k8s target's plan of a run: per side (the version-matched bare vLLM baseline, then the stack) the
objects to apply, rendered from manifests/, the objects whose readiness gates the load, the Service's
cluster DNS address, and the load Job. `write_plan` keeps it in the run folder (one YAML file per side and
plan.json), which is all `--dry-run` does."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from harness.errors import LayerbenchError
from harness.load.barrier import Shard
from harness.profile.schema import LoadProfile
from harness.targets.k8s.common import (
    Deployed,
    check_stack,
    object_name,
)
from harness.targets.k8s.engines import check_engines, engine_count
from harness.targets.k8s.plan import ClusterSettings, K8sPlan, Side, settle
from harness.targets.k8s.render_load import (
    LoadCommand,
    LoadNames,
    load_job,
    peers_service,
    profile_configmap,
    uses_pvc,
)
from stacks.base import Stack, target_form


class _Dumper(yaml.SafeDumper):
    """Every object written out in full (a label dict shared by two objects must not become a YAML alias), and
    multi-line text (serveConfigV2, a model repository's files, the profile) as readable literal blocks."""

    def ignore_aliases(self, data) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _text)


def dump_yaml(documents: list[dict]) -> str:
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False)


def side_labels(command: str, baseline: bool = True) -> list[str]:
    """`run` deploys the stack alone; `compare` and `audit` its bare vLLM baseline first; `capacity` the stack,
    and its baseline first with BASELINE=1."""
    return ["stack"] if command == "run" or (command == "capacity" and not baseline) else ["baseline", "stack"]


def render_side(stack: Stack, cs: ClusterSettings, run_id: str, label: str) -> tuple[str, Deployed]:
    """(the side's stack kind, what it deploys): the baseline is bare vLLM with the stack's engine settings."""
    kind = "vllm" if label == "baseline" else stack.kind
    return kind, target_form(kind, "k8s")(stack, cs, run_id, label)


def render_plan(stack: Stack, profile: LoadProfile, cs: ClusterSettings, run_id: str,
                what: LoadCommand | None = None, baseline: bool = True) -> K8sPlan:
    """Every side of `what.command` (run, compare, audit, capacity; default: run) for `stack`, with its load Job;
    nothing is applied. The cluster settings are settled first (the engine version, the GPUs per pod, the profile's
    model)."""
    what = what or LoadCommand()
    command = what.command
    check_stack(stack.kind, "k8s")
    cs, how = settle(cs, stack.kind, getattr(stack.options, "mode", None), profile.engine)
    check_engines(cs, stack.settings.engine)
    if profile.engine.replicas > 1:
        # the load deploys no engine: `--stack endpoint` fronts none (stacks.base.replicas.check_replicas), so it runs
        # as one engine's load against the side's URL, or spreads over the bare side's engines (Deployed.spread)
        what = replace(what, extra=(*what.extra, "--replicas", "1"))
    if cs.load_parallelism > 1 and command == "capacity":
        raise LayerbenchError("capacity searches one level at a time from one load pod: set load_parallelism 1")
    if cs.load_parallelism > 1:
        Shard(0, cs.load_parallelism, None).check(profile.levels(), profile.open_loop)
    sides = []
    rendered = [(label, *render_side(stack, cs, run_id, label)) for label in side_labels(command, baseline)]
    cache = uses_pvc([d.objects for _, _, d in rendered], cs.hf_cache_pvc)  # the served model's tokenizer is there
    for label, kind, deployed in rendered:
        names = LoadNames(object_name(run_id, label, kind), run_id, label)
        profile_cm = profile_configmap(names, cs, profile)
        job = load_job(names, cs, what, deployed, cache)
        peers = [peers_service(names, cs)] if cs.load_parallelism > 1 else []
        sides.append(Side(label=label, stack=kind, objects=[profile_cm, *deployed.objects, *peers],
                          ready=deployed.ready,
                          url=deployed.url, protocol=deployed.protocol, engine_selector=deployed.engine_selector,
                          load_job=job, engine_images=deployed.engine_images,
                          gpus=cs.replicas * engine_count(stack) * (cs.gpus or 0),
                          aliases=deployed.aliases))
    return K8sPlan(run_id=run_id, namespace=cs.namespace, sides=sides, settings=cs, engine=how, command=command,
                   stack=stack.kind)


def side_documents(side: Side) -> list[dict]:
    """What a side's YAML file holds: its objects in apply order, then its load Job."""
    return [*side.objects, side.load_job]


def write_plan(plan: K8sPlan, out_dir: Path) -> list[Path]:
    """results/<run>/manifests/<side>-<stack>.yaml per side and plan.json; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for side in plan.sides:
        path = out_dir / f"{side.label}-{side.stack}.yaml"
        path.write_text(dump_yaml(side_documents(side)))
        paths.append(path)
    path = out_dir / "plan.json"
    path.write_text(plan.model_dump_json(indent=2))
    return [*paths, path]
