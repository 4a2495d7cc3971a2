"""A compare whose sides were measured on a cluster (k8s) or a docker host: each side's load left a run folder
under results/<run>/<side>/ (one per load pod), unpacked from its Job's log or written by commands.sh. This
turns them into the run folder a local compare writes (run.json, requests.jsonl, scrapes.jsonl, the sides'
summaries, compare.json), concluding through the same functions as a local compare (harness.analysis.conclude.settle),
so `layerbench render` and `make report` read it like any other, and its deltas are those a local compare of
the same per-side data would give."""

from __future__ import annotations

import json
import time
from pathlib import Path

from harness.analysis.conclude import Evidence, settle
from harness.analysis.shards import Merged, PodCount, merge, run_folders
from harness.errors import LayerbenchError
from harness.profile.schema import LoadProfile
from harness.results import failure_reason, git_revision, read_jsonl
from harness.schemas import SIDES, AppliedConfig, CompareSummary, RunSummary, ServedModel
from stacks.base import parse_startup_log


def _single(folder: Path, label: str) -> Merged:
    path = folder / "summary.json"
    if not path.exists():
        raise LayerbenchError(f"{folder} has no summary.json: the side's load did not get to write its results")
    run = RunSummary.model_validate_json(path.read_text()).model_copy(update={"label": label})
    records = [{**r, "label": label} for r in read_jsonl(folder / "requests.jsonl")]
    scrapes = [{**s, "label": label} for s in read_jsonl(folder / "scrapes.jsonl")]
    sent = sum(lv.sent or 0 for lv in run.levels)
    return Merged(run=run, records=records, scrapes=scrapes,
                  per_pod=[PodCount(pod=0, sent=sent, recorded=sum(r.get("phase") == "measure" for r in records))])


def side_results(side_dir: Path, profile: LoadProfile, label: str) -> Merged | None:
    """A side's measured run (its pods merged), or None when its load left no run folder."""
    folders = run_folders(side_dir) if side_dir.is_dir() else []
    if not folders:
        return None
    return merge(folders, profile, label) if len(folders) > 1 else _single(folders[0], label)


def applied_from_logs(run: RunSummary, logs: Path) -> AppliedConfig:
    """What the engine applied: /v1/models as the load read it, and the engine's startup lines in its pods' logs
    (KV-cache size, maximum concurrency, the config line's model, revision and tensor-parallel size)."""
    cfg = run.applied.model_copy()
    for path in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        found = parse_startup_log(path.read_text(errors="replace"))
        for field in AppliedConfig.model_fields:
            if getattr(cfg, field) is None and getattr(found, field) is not None:
                setattr(cfg, field, getattr(found, field))
    return cfg


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def assemble(run_dir: Path, summary: CompareSummary, profile: LoadProfile, sides: dict[str, dict],
             plan: dict | None = None, meta: dict | None = None) -> CompareSummary:
    """Fills `summary` (what was decided before the run: stack, shape, model, target, cluster) from the sides'
    results in run_dir and writes the run folder's files. sides: per label what the target recorded of it
    (engine_version, images, nodes, status, error). plan: the compare's plan file (harness.targets.remote_run:
    the stack's note on its metrics, whether versions may differ)."""
    note, allow_mismatch = (plan or {}).get("note"), bool((plan or {}).get("allow_mismatch", False))
    merged: dict[str, Merged] = {}
    for label in SIDES:
        found = side_results(run_dir / label, profile, label)
        info = sides.get(label, {})
        if found is None:
            summary.failures[label] = info.get("error") or f"{label}: its load left no results"
            continue
        merged[label] = found
        found.run.status = info.get("status", "complete")
        summary.runs[label] = found.run
        summary.applied[label] = applied_from_logs(found.run, run_dir / label / "logs")
        summary.versions[label] = info.get("engine_version") or found.run.engine_version
        if info.get("error"):
            summary.failures[label] = info["error"]
    if "baseline" not in merged:
        summary.status = "failed"
    scrapes = [s for m in merged.values() for s in m.scrapes]
    settle(summary, profile, Evidence(scrapes, {}, note), allow_mismatch)
    if summary.cluster is not None:
        summary.cluster["pods"] = {label: [p.model_dump() for p in m.per_pod] for label, m in merged.items()}
    _write(run_dir / "requests.jsonl", "".join(json.dumps(r) + "\n" for m in merged.values() for r in m.records))
    _write(run_dir / "scrapes.jsonl", "".join(json.dumps(s) + "\n" for s in scrapes))
    for label, m in merged.items():
        _write(run_dir / f"summary-{label}.json", m.run.model_dump_json(indent=2))
    run_meta = {"run_id": summary.run_id, "command": "compare", "stack": summary.stack, "target": summary.target,
                "status": summary.status, "profile": profile.model_dump(mode="json"), "options": summary.options,
                "git": git_revision(), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                **({"model": summary.model.model_dump(mode="json")} if summary.model else {}),
                "cluster": summary.cluster, **(meta or {})}
    if summary.failures:
        run_meta["reason"] = failure_reason(summary.failures)
    _write(run_dir / "run.json", json.dumps(run_meta, indent=2, default=str))
    _write(run_dir / "compare.json", summary.model_dump_json(indent=2))
    return summary


def cluster_model(repo: str, revision: str) -> ServedModel:
    """The model a cluster served, as the report names it (its files are in the cluster's cache, not here)."""
    name = repo.rsplit("/", 1)[-1].lower()
    return ServedModel(source="hub", id=repo, revision=revision if len(revision) == 40 else None,
                       requested_revision=revision, served_name=name)
