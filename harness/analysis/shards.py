"""One side's load measured by several load processes (pods), merged into one run: each level's records from
every pod, on one clock, judged as the level they were parts of, each request once. Every pod recorded what it
sent (RunWriter writes each record as it is measured); `per_pod` keeps sent against recorded for each pod, so a
report can show that nothing was lost or counted twice.

Clocks: each pod's records are on its own monotonic clock; its run.json notes that clock's offset to the wall
clock at its start, and the merge moves every record onto the wall clock (nodes' clocks agree to NTP's
precision, far below a level's length)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from harness.analysis.stats import level_stats
from harness.errors import LayerbenchError
from harness.load.client import RequestRecord
from harness.profile.schema import LoadProfile
from harness.results import read_jsonl
from harness.schemas import ClientHealth, LevelSummary, RunSummary

TIME_FIELDS = ("t_due_ns", "t_task_ns", "t_start_ns", "t_end_ns")


class PodCount(BaseModel):
    pod: int
    sent: int
    recorded: int


class Merged(BaseModel):
    run: RunSummary
    records: list[dict]  # every pod's records, on the wall clock, each once
    scrapes: list[dict]  # pod 0's (the only one that reads the metric endpoints)
    per_pod: list[PodCount]


def run_folders(side_dir: Path) -> list[Path]:
    """The load's run folders under a side's unpacked results: one, or one per pod (pod-<i>/<run>/)."""
    return sorted(p.parent for p in side_dir.rglob("run.json") if (p.parent / "requests.jsonl").exists())


def _pod(folder: Path) -> tuple[int, int, RunSummary, list[dict]]:
    """(pod index, the clock's offset to wall ns, its summary, its records moved onto the wall clock)."""
    meta = json.loads((folder / "run.json").read_text())
    offset = int((meta.get("clock") or {}).get("wall_minus_perf_ns") or 0)
    path = folder / "summary.json"
    if not path.exists():
        raise LayerbenchError(f"{folder} has no summary.json: that load pod did not get to write its results")
    run = RunSummary.model_validate_json(path.read_text())
    records = []
    for r in read_jsonl(folder / "requests.jsonl"):
        for f in TIME_FIELDS:
            if r.get(f):
                r[f] += offset
        records.append(r)
    return int(meta.get("pod", 0)), offset, run, records


def worst_health(healths: list[ClientHealth]) -> ClientHealth:
    """The pods' client health as one: the busiest pod's figures, every pod's reasons."""
    worst = max(healths, key=lambda h: h.cpu_pct).model_copy(deep=True)
    worst.saturated, worst.starved = any(h.saturated for h in healths), any(h.starved for h in healths)
    worst.reasons = list(dict.fromkeys(r for h in healths for r in h.reasons))
    return worst


def merge(folders: list[Path], profile: LoadProfile, label: str) -> Merged:
    """The pods' runs as one run of `label` (their levels, repeat by repeat, merged)."""
    pods = sorted((_pod(f) for f in folders), key=lambda p: p[0])
    if [p[0] for p in pods] != list(range(len(pods))):
        raise LayerbenchError(f"load pods {[p[0] for p in pods]} of {label}: expected 0..{len(pods) - 1}, each once")
    base = pods[0][2].model_copy(update={"label": label, "levels": [], "client_saturated_levels": [],
                                         "client_starved_levels": [], "not_steady_levels": [],
                                         "off_schedule_levels": []}, deep=True)
    records = [{**r, "label": label} for _, _, _, rs in pods for r in rs]
    by_key = {(lv.stats.repeat, lv.stats.level): [] for _, _, run, _ in pods for lv in run.levels}
    for _, _, run, _ in pods:
        for lv in run.levels:
            by_key[(lv.stats.repeat, lv.stats.level)].append(lv)
    for (repeat, level), parts in by_key.items():
        mine = [RequestRecord.from_json(r) for r in records if r.get("phase") == "measure" and r.get("repeat") == repeat
                and r.get("part_of", r.get("level")) == level]
        stats = level_stats(mine, 0 if profile.open_loop else int(level), profile.slo, repeat=repeat,
                            rate=float(level) if profile.open_loop else None)
        first = next((lv for lv in parts if lv.server.scrapes), parts[0])
        base.add(LevelSummary(stats=stats, client=worst_health([lv.client for lv in parts]), process_cpu_s={},
                              window_s=max(lv.window_s for lv in parts), server=first.server,
                              incomplete="; ".join(lv.incomplete for lv in parts if lv.incomplete) or None,
                              invocation=parts[0].invocation, sent=sum(lv.sent or 0 for lv in parts)))
    per_pod = [PodCount(pod=i, sent=sum(lv.sent or 0 for lv in run.levels),
                        recorded=sum(r.get("phase") == "measure" for r in rs)) for i, _, run, rs in pods]
    scrapes = [{**s, "label": label} for s in read_jsonl(folders_of(pods, folders)[0] / "scrapes.jsonl")]
    return Merged(run=base, records=records, scrapes=scrapes, per_pod=per_pod)


def folders_of(pods: list, folders: list[Path]) -> list[Path]:
    """The folders in pod order."""
    index = {_pod_index(f): f for f in folders}
    return [index[p[0]] for p in pods]


def _pod_index(folder: Path) -> int:
    return int(json.loads((folder / "run.json").read_text()).get("pod", 0))
