"""A layer against its version-matched bare vLLM, K deployment pairs of them in counterbalanced order
(harness.measure.pairs: AB, BA, BA, AB, ...; one at a time, as on a host with one accelerator: each deployment is torn
down and verified freed before the next starts), the same profile with fresh unique prefixes. Per level: the
verdicts of throughput, goodput and TTFT p95 with their intervals (harness.analysis.deltas, harness.analysis.verdict),
each side's
means, whether it was steady, and where the CPU went, process by process. `compare --stack vllm` is the A/A run:
bare vLLM against bare vLLM, this host's noise for the profile; every later compare of the same system and profile
pools its variance in."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from harness.analysis.conclude import Evidence, pair_order, settle
from harness.analysis.diagnose import diagnose
from harness.analysis.sequential import Looks
from harness.errors import LayerbenchError
from harness.measure.pairs import measure_pairs
from harness.measure.planning import Plan
from harness.measure.resume import ResumeRefused
from harness.measure.run import Run
from harness.measure.session import Sides
from harness.measure.stopping import SequentialStop, start_times
from harness.profile.schema import LoadProfile
from harness.results import read_jsonl
from harness.schemas import (
    AAReference,
    CompareSummary,
)
from stacks.base import Stack
from stacks.base.engine_frontend import frontend_note
from stacks.base.engine_model import study_comparable

# a profile's knobs that size or stop the design, not what one pair's noise depends on
DESIGN_KNOBS = {"name", "budget_min", "max_pairs", "target_mde", "pairs", "stopping"}


def noise_key(stack: Stack, profile: LoadProfile, target: str = "local") -> dict[str, str]:
    """What a pair's noise depends on, which an A/A must share to floor a compare: the engine's version, the model
    and its revision, the engines per side, the GPUs, the target and the profile's content. An A/A of the same
    profile name with another engine or model measured another system's noise (a compare with one pair was once
    judged on vLLM-against-vLLM noise of another version alone)."""
    m = stack.settings.model
    body = profile.model_dump_json(exclude=DESIGN_KNOBS)
    return {"engine": stack.engine_version(),
            "model": f"{m.id}@{m.revision or '-'} config {m.config_digest or '-'}" if m else "tiny",
            "replicas": str(stack.settings.engine.replicas),
            "devices": ",".join(map(str, stack.settings.devices)) or "none",
            "target": target,
            "profile": hashlib.sha256(body.encode()).hexdigest()[:12]}


def latest_aa(results: Path, profile: str, key: dict[str, str] | None, exclude: str | None = None,
              deployments: str = "sequential") -> AAReference | None:
    """The latest complete A/A of the profile measured with the same design (an interleaved pair's noise is not a
    sequential one's) and the same noise key (engine, model, replicas, GPUs, target, profile digest); an A/A
    stored before its key was kept matches none. key None: no A/A can match."""
    if key is None:
        return None
    for path in sorted(results.glob("*compare-vllm*/compare.json"), reverse=True):
        if path.parent.name == exclude:
            continue
        try:
            s = CompareSummary.model_validate_json(path.read_text())
        except ValueError:
            continue  # written by another version of layerbench
        if s.status == "complete" and s.profile == profile and s.stack == "vllm" and s.deployments == deployments \
                and s.noise_key == key:
            return AAReference(run_id=s.run_id, levels={lv.level: (
                lv.delta_pct, lv.ci.half_width_pct if lv.ci else None, lv.verdict) for lv in s.levels},
                components=s.components, pairs=s.pairs)
    return None


HARNESS_BENCH = Path("reports/harness/harness-bench.json")  # written by `make bench-harness`


def observer_effect(policy: str, path: Path = HARNESS_BENCH) -> str | None:
    """What the observer benchmark measured for this scrape policy on this host, in one sentence."""
    try:
        return json.loads(path.read_text())["observer_effect"]["policies"][policy]
    except (OSError, ValueError, KeyError):
        return None


def _gpu_host() -> dict | None:
    from harness.host.gpus import host_gpus

    host = host_gpus()
    return host.to_json() if host else None


def check_versions(baseline: Stack, stack: Stack, allow_mismatch: bool) -> dict[str, str]:
    versions = {"baseline": baseline.engine_version(), "stack": stack.engine_version()}
    if versions["baseline"] != versions["stack"] and not allow_mismatch:
        raise LayerbenchError(
            f"engine versions differ: baseline vLLM {versions['baseline']} vs {stack.kind} vLLM {versions['stack']}. "
            "A layer's cost would be mixed with the engine's; pass --allow-version-mismatch to compare anyway"
        )
    return versions


def run_compare(stack: Stack, run: Run, allow_mismatch: bool, pairs_plan: Plan | None = None) -> CompareSummary:
    """Deployment pairs in counterbalanced order (harness.measure.pairs), and the verdicts between them:
    profile.pairs of
    them (stopping: fixed), or, with pairs_plan (stopping: sequential), pairs added until every level is decided
    or the budget or max_pairs is spent (harness.measure.stopping). run.plan: a resumed compare's; a deployment it
    measured completely is not made again, the one it stopped in continues after its last complete level."""
    profile, writer, plan, repeats, placement = run.profile, run.writer, run.plan, run.n_repeats(), run.placement
    baseline = stack.baseline()
    if baseline is None:
        raise LayerbenchError(f"stack {stack.kind} names no baseline")
    versions = check_versions(baseline, stack, allow_mismatch)
    for label, prior in (plan.prior.items() if plan else ()):  # before anything is deployed again
        if versions[label] != prior.engine_version:
            raise ResumeRefused(f"cannot resume: the {label}'s engine is now version {versions[label]}, the first "
                                f"invocation measured {prior.engine_version}")
    study = study_comparable(profile.name, stack.settings.model) and profile.builtin_shaped()
    key = noise_key(stack, profile)
    summary = CompareSummary(
        run_id=writer.run_id, stack=stack.kind, baseline_stack=baseline.kind, in_request_path=stack.in_request_path,
        renames=stack.metric_aliases(), metricless=stack.metricless_endpoints(),
        shape=stack.shape(), published=stack.published() if study else None, model=stack.settings.model,
        replay=profile.replay().describe() if profile.trace is not None else None,
        devices=list(stack.settings.devices), gpu_host=_gpu_host(),
        profile=profile.name, repeats=repeats, pairs=profile.pairs, deployments=profile.deployments,
        order=pair_order(profile.pairs) if profile.deployments == "sequential" else [0] * profile.pairs,
        margin=profile.equivalence_margin, ttft_margin=profile.ttft_margin, versions=versions,
        version_match=versions["baseline"] == versions["stack"],
        applied={}, settings_match=False, settings_mismatches=[], options=dict(stack.settings.options),
        frontend=frontend_note(baseline, stack, stack.settings.engine.frontend),
        scrape_policy=profile.scrape, slo=profile.slo, invocations=(plan.invocation if plan else 0) + 1,
        emulated_step=profile.engine.step, noise_key=key,
        aa=latest_aa(writer.dir.parent, profile.name, key, exclude=writer.run_id, deployments=profile.deployments),
    )

    def keep(measured: Sides) -> None:
        summary.runs, summary.failures = dict(measured.runs), dict(measured.failures)
        for label, side in measured.runs.items():
            if label not in measured.failures:
                summary.applied[label] = side.applied
                summary.versions[label] = side.engine_version  # the live answer beats the declared one
        summary.status = "failed" if "baseline" in measured.failures else summary.status
        writer.write_json("compare.json", summary.model_dump())

    t0 = time.monotonic()
    live: dict = {}

    def judge_at(looks: Looks | None) -> None:
        seen = Evidence(read_jsonl(writer.dir / "scrapes.jsonl"), live, stack.observability_note())
        settle(summary, profile, seen, allow_mismatch, looks)

    stop = SequentialStop(summary, pairs_plan, run, judge_at) if pairs_plan is not None else None
    if profile.deployments == "interleaved":
        from harness.measure.interleave import measure_interleaved

        measured = measure_interleaved(stack, profile.pairs, run, after_side=keep)
    else:
        most = pairs_plan.max_pairs if pairs_plan is not None else profile.pairs
        if pairs_plan is not None:
            summary.pairs, summary.order = most, pair_order(most)
        measured = measure_pairs(stack, most, run, after_side=keep, stop=stop)
    keep(measured)
    live.update(measured.live)
    judge_at(stop.last if stop is not None else None)
    summary.diagnosis = diagnose(summary, stack.tuning(), {m.key: (f"{stack.server_name}'s {m.key}", m.queue_ms)
                                                           for m in stack.layer_metrics() if m.queue_ms})
    if stop is not None and stop.state.profiled:  # where the diagnosis's windows ran, and what they cost
        summary.diagnosis.profiled += " (" + "; ".join(f"{label}: {where}" for label, where in
                                                      sorted(stop.state.profiled.items())) + ")"
    if stop is not None and stop.state.looks:
        summary.pairs = stop.state.looks[-1]
        summary.order = pair_order(summary.pairs)
    summary.start_s = start_times(writer)
    summary.wall_s = time.monotonic() - t0
    if placement is not None:  # harness.measure.session.place(profile), as run.json records it
        summary.placement, summary.host_cores = placement["sentence"], placement["host_cores"]
    summary.observer_effect = observer_effect(profile.scrape)
    writer.write_json("compare.json", summary.model_dump())
    return summary
