"""What a compare concludes once both sides' runs are in: versions, engine settings, the served model, the
per-level deltas and verdicts, the audit and the status. One settle for every target: a local compare's measured
runs and a cluster's unpacked load Jobs go through the same code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.analysis.audit import audit_from_scrapes
from harness.analysis.deltas import client_bound, judged_levels
from harness.analysis.emulation import stretched_levels, unchecked_levels
from harness.analysis.judging import Design, instability
from harness.analysis.sequential import Looks
from harness.profile.schema import LoadProfile
from harness.schemas import AppliedConfig, CompareSummary, ServedModel

ORDER = (1, -1, -1, 1)  # +1: the pair's baseline is deployed first (ABBA, then BAAB, ...)


def pair_order(pairs: int) -> list[int]:
    return [ORDER[k % len(ORDER)] for k in range(pairs)]


def settings_diff(a: AppliedConfig, b: AppliedConfig) -> list[str]:
    """Engine settings both deployments must have applied identically (from /v1/models and the engine log)."""
    diffs = []
    for field in ("max_model_len", "kv_cache_tokens", "max_concurrency", "tensor_parallel_size"):
        va, vb = getattr(a, field), getattr(b, field)
        if field == "tensor_parallel_size" and va is None and vb is None:
            continue  # neither engine prints vLLM's config line (the reference engine): nothing to hold against
        if va is None or vb is None:
            diffs.append(f"{field}: not found ({'baseline' if va is None else 'stack'})")
        elif va != vb:
            diffs.append(f"{field}: baseline {va} vs stack {vb}")
    return diffs


def model_diff(model: ServedModel | None, applied: dict[str, AppliedConfig]) -> list[str]:
    """Each side that reported loading other files than the resolved model (from its engine's config line). A
    directory that is not on this host and not an HF-cache snapshot (a pod's /mnt/models, where KServe's storage
    initializer put the model's storageUri) cannot be told apart, so it is not held against the side."""
    if model is None:
        return []

    def unknowable(path: str) -> bool:
        return path.startswith("/") and "models--" not in path and not Path(path).exists()

    return [f"model: {label} loaded {a.model}" + (f" @ {a.revision}" if a.revision else "")
            + f", not {model.text()}" for label, a in applied.items()
            if a.model is not None and not unknowable(a.model) and not model.same_files(a.model, a.revision)]


@dataclass(frozen=True)
class Evidence:
    """What was seen of the deployments beside their runs: each side's metric scrapes, the live facts read while
    it was up (logs, listening sockets), and the stack's note on metrics it renames or lacks."""

    scrapes: list[dict]
    live: dict
    note: str | None = None


def settle(summary: CompareSummary, profile: LoadProfile, seen: Evidence, allow_mismatch: bool,
           looks: Looks | None = None) -> CompareSummary:
    """Everything a compare concludes once both sides' runs are in `summary.runs` (measured here, or unpacked
    from a cluster's load Jobs): versions, settings, the per-level deltas, the audit and the status."""
    summary.version_match = summary.versions.get("baseline") == summary.versions.get("stack")
    if not summary.version_match and not allow_mismatch:
        summary.failures["versions"] = f"live versions differ: {summary.versions}"
    if "baseline" in summary.applied and "stack" in summary.applied:
        summary.settings_mismatches = settings_diff(summary.applied["baseline"], summary.applied["stack"]) \
            + model_diff(summary.model, summary.applied)
        summary.settings_match = not summary.settings_mismatches
    base, stack = summary.runs.get("baseline"), summary.runs.get("stack")
    calibration = base.calibration if base else None
    summary.left_out = dict(calibration.left_out) if calibration else {}
    levels = sorted(c for c in profile.levels() if c not in summary.left_out)  # a trace's segments: by rate too
    no_verdict = {**client_bound(base, stack), **{c: ("host-bound", "no verdict: this host stretched the emulated "
                  "step here (the emulation table), so the level measures the host, not the emulated GPU")
                  for c in stretched_levels(summary)}}
    no_verdict |= {c: ("unchecked", "no verdict: neither the engine's step histograms nor the client's TPOT could "
                       "be read here on some side (the emulation table), so whether this host stretched the "
                       "emulated step is unknown") for c in unchecked_levels(summary) if c not in no_verdict}
    design = Design(order=summary.order or pair_order(summary.pairs),  # 0: interleaved
                    host=summary.aa.components if summary.aa else {}, margin=summary.margin,
                    ttft_margin=summary.ttft_margin, looks=looks)
    summary.levels, summary.components = judged_levels(base, stack, levels, profile.open_loop, design, no_verdict)
    summary.instability = instability(base, stack, [lv.level for lv in summary.levels if lv.judged])
    summary.audit = audit_from_scrapes(seen.scrapes, seen.live, summary.stack, summary.renames or (), seen.note,
                                       summary.metricless)
    summary.status = "failed" if summary.failures else "complete"
    return summary
