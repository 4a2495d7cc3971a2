"""A compare on the k8s or docker target, from its rendered plan to its report: what is known before the run
is kept in compare-plan.json (the stack, its shape, the model, the target), the sides run on the cluster (or
through commands.sh), and once their results are in the run folder the compare is concluded and reported as a
local one is (harness.targets.remote_compare). `layerbench render RUN` does the last step for a docker run whose
commands.sh the user ran by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import LayerbenchError
from harness.profile.schema import LoadProfile
from harness.schemas import SIDES, CompareSummary
from harness.targets.remote_compare import assemble, cluster_model
from stacks.base import Stack
from stacks.base.engine_model import study_comparable

PLAN_FILE = "compare-plan.json"


@dataclass(frozen=True)
class Where:
    """Where a remote compare's sides run: the target, the cluster's model (repo id and revision), the metric
    names the stack's image renames, and the cluster's own facts (a k8s namespace)."""

    target: str
    model: str
    revision: str
    aliases: tuple[str, ...] = ()
    cluster: dict = field(default_factory=dict)


def skeleton(stack: Stack, profile: LoadProfile, run_id: str, repeats: int | None, where: Where) -> CompareSummary:
    """The compare as known before its sides run."""
    served = cluster_model(where.model, where.revision)
    target, aliases, cluster = where.target, where.aliases, where.cluster
    study = study_comparable(profile.name, served) and profile.builtin_shaped()
    return CompareSummary(
        run_id=run_id, stack=stack.kind, baseline_stack="vllm", in_request_path=stack.in_request_path,
        renames=aliases, shape=stack.shape(),
        published=stack.published() if study else None, profile=profile.name,
        repeats=repeats or profile.repeats, versions={}, version_match=False, applied={}, settings_match=False,
        settings_mismatches=[], options=dict(stack.settings.options), scrape_policy=profile.scrape, slo=profile.slo,
        model=served, target=target, cluster=cluster,
        replay=profile.replay().describe() if profile.trace is not None else None)


def write_plan_file(run_dir: Path, summary: CompareSummary, profile: LoadProfile, note: str | None,
                    allow_mismatch: bool) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / PLAN_FILE
    path.write_text(json.dumps({"summary": summary.model_dump(mode="json"), "profile": profile.model_dump(mode="json"),
                                "note": note, "allow_mismatch": allow_mismatch}, indent=2))
    return path


def side_records(run_dir: Path) -> dict[str, dict]:
    """What the target recorded of each side (k8s-side.json or docker-side.json): version, images, nodes."""
    out = {}
    for label in SIDES:
        for name in ("k8s-side.json", "docker-side.json"):
            path = run_dir / label / name
            if path.exists():
                out[label] = json.loads(path.read_text())
                break
    return out


def conclude(run_dir: Path, status: str | None = None, error: str | None = None) -> CompareSummary:
    """The compare of run_dir concluded from its sides' results and compare-plan.json; compare.json and the run
    folder's files written. status/error: how the run ended, where the caller knows (interrupted, failed)."""
    path = run_dir / PLAN_FILE
    if not path.exists():
        raise LayerbenchError(f"{run_dir} has neither compare.json nor {PLAN_FILE}: not a compare's run folder")
    plan = json.loads(path.read_text())
    summary = CompareSummary.model_validate(plan["summary"])
    profile = LoadProfile.model_validate(plan["profile"])
    sides = side_records(run_dir)
    run_record = run_dir / "k8s-run.json"
    if run_record.exists():  # the cluster's context, server, namespace and every image's measured vLLM
        rec = json.loads(run_record.read_text())
        summary.cluster = {**(summary.cluster or {}), **{k: rec.get(k) for k in ("context", "server", "namespace",
                                                                                  "images")}}
    for label, info in sides.items():  # the cluster's record: each side's images and nodes, for the report
        keep = ("images", "nodes", "stack", "gpu_telemetry")  # gpu_telemetry: the dcgm-exporter scraped, or none
        summary.cluster = {**(summary.cluster or {}), label: {k: info.get(k) for k in keep}}
    summary = assemble(run_dir, summary, profile, sides, plan)
    if status and status != "complete":
        summary.status = status
        if error:
            summary.failures.setdefault("run", error)
        (run_dir / "compare.json").write_text(summary.model_dump_json(indent=2))
        meta = json.loads((run_dir / "run.json").read_text())
        (run_dir / "run.json").write_text(json.dumps({**meta, "status": status, "reason": error}, indent=2))
    return summary


def has_results(run_dir: Path) -> bool:
    from harness.analysis.shards import run_folders

    return any(run_folders(run_dir / label) for label in SIDES if (run_dir / label).is_dir())


def conclude_capacity(run_dir: Path, stack: str, shape: str | None, profile: LoadProfile, sla) -> object:
    """A cluster capacity search's summary from its sides' own searches (each load Job ran `capacity`)."""
    from harness.analysis.shards import run_folders
    from harness.schemas import CapacitySummary

    summary = CapacitySummary(run_id=run_dir.name, stack=stack, shape=shape, profile=profile.name, sla=sla,
                              scrape_policy=profile.scrape)
    for label, info in {**{k: {} for k in SIDES}, **side_records(run_dir)}.items():
        folders = run_folders(run_dir / label) if (run_dir / label).is_dir() else []
        if not folders:
            continue
        side = CapacitySummary.model_validate_json((folders[0] / "summary.json").read_text())
        result = side.capacity.model_copy(update={"label": label, "stack": "vllm" if label == "baseline" else stack}) \
            if side.capacity else None
        setattr(summary, "baseline" if label == "baseline" else "capacity", result)
        summary.versions[label] = info.get("engine_version") or "?"
        summary.failures.update(side.failures)
    summary.status = "failed" if summary.failures or summary.capacity is None else "complete"
    summary.finish()
    (run_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_dir.name, "command": "capacity", "stack": stack,
                                                  "status": summary.status, "target": "k8s",
                                                  "profile": profile.model_dump(mode="json")}, indent=2))
    return summary
