"""A layer against its version-matched bare vLLM: baseline first, then the stack, one at a time (one
accelerator is assumed: the first is torn down and verified freed before the second starts), the same
profile with fresh unique prefixes, N repeats each. Per level: throughput delta with its 95% interval
(harness/noise.py), TTFT p95, goodput, whether each side was steady, and where the CPU went, process by
process. `compare --stack vllm` is the A/A run: bare vLLM against a second bare vLLM deployment, the
method's noise floor on this host; every compare report quotes the latest one for its profile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from rich.console import Console

from harness.audit import AuditResult, audit_from_scrapes
from harness.errors import LayerbenchError
from harness.noise import DeltaInterval, delta_interval
from harness.profile import SLO, EmulatedStep, LoadProfile
from harness.results import RunWriter, read_jsonl
from harness.resume import ResumePlan, ResumeRefused
from harness.session import Sides, baseline_then_stack, sides
from harness.stats import Leveled
from harness.steady import likely_cause
from harness.sweep import LevelSummary, RunSummary
from stacks.base import AppliedConfig, PublishedResult, ServedModel, Stack
from stacks.engine_model import study_comparable


class LevelDelta(Leveled):
    baseline_tok_s: float | None
    stack_tok_s: float | None
    delta_pct: float | None
    ci: DeltaInterval | None  # 95% interval of the delta; None: not enough values
    noise_pct: float | None  # the interval's half-width, for the plot's band
    verdict: str  # "overhead" | "gain" | "within noise" | "no interval" | "missing"
    invocations: list[int] = []  # which invocations measured this level (0: the first, n: the n-th resume)
    incomplete: list[str] = []  # repeats stopped before their end, with why
    baseline_not_steady: list[str] = []  # one line per unsteady repeat, with its reasons
    stack_not_steady: list[str] = []
    baseline_modes: list[str] = []  # bimodal TTFT, per repeat where found
    stack_modes: list[str] = []
    baseline_ttft_p95_ms: float | None
    stack_ttft_p95_ms: float | None
    baseline_goodput: float | None
    stack_goodput: float | None
    baseline_good_rps: float | None
    stack_good_rps: float | None
    baseline_cpu_cores: dict[str, float]  # process label -> cores during the level
    stack_cpu_cores: dict[str, float]
    baseline_client_cores: float | None
    stack_client_cores: float | None
    baseline_e2e_p95_ms: float | None = None
    stack_e2e_p95_ms: float | None = None
    scheduled_rate: float | None = None  # open loop: the schedule's rate as drawn (both sides share a schedule)
    baseline_achieved_rate: float | None = None  # open loop: the rate the client actually sent at, req/s
    stack_achieved_rate: float | None = None
    baseline_gpu: dict[str, float | None] = {}  # gpu_means(): utilisation, memory, power, clocks over the repeats
    stack_gpu: dict[str, float | None] = {}


class AAReference(BaseModel):
    """The latest A/A compare (bare vLLM vs bare vLLM) of the same profile: this host's noise floor."""

    run_id: str
    # level (c, or req/s in an open loop) -> (delta %, interval half-width %, verdict)
    levels: dict[int | float, tuple[float | None, float | None, str]]


class CompareSummary(BaseModel):
    run_id: str
    stack: str
    baseline_stack: str
    in_request_path: bool
    shape: str | None = None  # which form of the stack, where it has several (KServe: "raw mode")
    published: PublishedResult | None = None  # what a study measured for this shape (the report compares)
    profile: str
    repeats: int
    versions: dict[str, str]
    version_match: bool
    applied: dict[str, AppliedConfig]
    settings_match: bool
    settings_mismatches: list[str]
    options: dict
    status: str = "running"
    failures: dict[str, str] = {}
    levels: list[LevelDelta] = []
    audit: AuditResult | None = None
    wall_s: float | None = None
    runs: dict[str, RunSummary] = {}
    aa: AAReference | None = None
    scrape_policy: str = "boundary"
    observer_effect: str | None = None  # what the observer benchmark measured for this policy, where it exists
    placement: str | None = None
    host_cores: int = 0
    invocations: int = 1  # how many `compare` / `compare --resume` invocations measured it
    slo: SLO | None = None  # the profile's, which goodput and the report's capacity are judged by
    renames: tuple[str, ...] | None = None  # the stack's Stack.metric_aliases(), for reading its scrapes again
    emulated_step: EmulatedStep | None = None  # the GPU-like engine's configured step (engine.model: gpu-like)
    model: ServedModel | None = None  # what both sides served: id, resolved revision, config digest
    devices: list[int] = []  # the GPUs each side was given (the same for both); [] on a host without GPUs
    gpu_host: dict | None = None  # the host's GPUs (harness.gpus.GpuHost.to_json); None: no GPU
    target: str = "local"  # where both sides ran: local, k8s or docker
    cluster: dict | None = None  # k8s/docker: the context, server, namespace, and each side's images and nodes

    @property
    def on_gpu(self) -> bool:
        """Measured on a GPU host (the CPU-host readings of the report do not apply)."""
        return bool(self.devices)

    @property
    def open_loop(self) -> bool:
        """Its levels are offered request rates (an open-loop profile)."""
        return any(lv.rate is not None for lv in self.levels)

    @property
    def is_aa(self) -> bool:
        """The same stack on both sides (bare vLLM against bare vLLM): differences are this host's noise."""
        return self.stack == self.baseline_stack

    @property
    def measured_repeats(self) -> set[tuple[str, float, int]]:
        """(side, level, repeat) of every repeat that counts in the figures (not stopped early)."""
        return {(label, lv.stats.level, lv.stats.repeat) for label, run in self.runs.items() for lv in run.levels
                if lv.incomplete is None}

    @property
    def top(self) -> LevelDelta | None:
        """The highest level with a delta: the one a headline quotes."""
        return next((lv for lv in reversed(self.levels) if lv.delta_pct is not None), None)


def latest_aa(results: Path, profile: str, exclude: str | None = None) -> AAReference | None:
    for path in sorted(results.glob("*compare-vllm*/compare.json"), reverse=True):
        if path.parent.name == exclude:
            continue
        try:
            s = CompareSummary.model_validate_json(path.read_text())
        except ValueError:
            continue  # written by another version of layerbench
        if s.status == "complete" and s.profile == profile and s.stack == "vllm":
            return AAReference(run_id=s.run_id, levels={lv.level: (
                lv.delta_pct, lv.ci.half_width_pct if lv.ci else None, lv.verdict) for lv in s.levels})
    return None


HARNESS_BENCH = Path("reports/harness/harness-bench.json")  # written by `make bench-harness`


def observer_effect(policy: str, path: Path = HARNESS_BENCH) -> str | None:
    """What the observer benchmark measured for this scrape policy on this host, in one sentence."""
    try:
        return json.loads(path.read_text())["observer_effect"]["policies"][policy]
    except (OSError, ValueError, KeyError):
        return None


def _side_interval(b: list[LevelSummary], s: list[LevelSummary]) -> DeltaInterval | None:
    """From repeats when both sides have >= 2, else from the time blocks of single windows."""
    b_tok = [lv.stats.throughput_tok_s for lv in b]
    s_tok = [lv.stats.throughput_tok_s for lv in s]
    if len(b_tok) >= 2 and len(s_tok) >= 2:
        return delta_interval(b_tok, s_tok)
    b_blk = [x for lv in b for x in lv.stats.steady.blocks_tok_s]
    s_blk = [x for lv in s for x in lv.stats.steady.blocks_tok_s]
    ci = delta_interval(b_blk, s_blk, source="blocks (1 repeat)")
    if ci is None:
        return None
    # the blocks' ratio is of full-load rates; centre the interval on the measured windows' ratio
    point = 100.0 * (float(np.mean(s_tok)) / float(np.mean(b_tok)) - 1.0)
    shift = point - ci.delta_pct
    return ci.model_copy(update={"delta_pct": point, "lo_pct": ci.lo_pct + shift, "hi_pct": ci.hi_pct + shift})


def _cores(levels: list[LevelSummary]) -> tuple[dict[str, float], float | None]:
    """Mean cores per process label over the repeats of one level (CPU seconds / window)."""
    acc: dict[str, list[float]] = {}
    for lv in levels:
        for label, cpu_s in lv.process_cpu_s.items():
            acc.setdefault(label, []).append(cpu_s / lv.window_s if lv.window_s else 0.0)
    client = [lv.client.cpu_pct / 100 for lv in levels]
    return {k: float(np.mean(v)) for k, v in sorted(acc.items())}, (float(np.mean(client)) if client else None)


GPU_KEYS = ("util_pct_mean", "memory_used_mib_max", "power_w_mean", "sm_clock_mhz_mean", "tensor_active_mean")


def gpu_means(levels: list[LevelSummary]) -> dict[str, float | None]:
    """One level's GPU telemetry on one side: the mean over its repeats of the mean (the max for memory) over its
    GPUs; {} where none was read."""
    out: dict[str, float | None] = {}
    for key in GPU_KEYS:
        per_repeat = []
        for lv in levels:
            vals = [getattr(g, key) for g in lv.gpu if getattr(g, key) is not None]
            if vals:
                per_repeat.append(max(vals) if key == "memory_used_mib_max" else float(np.mean(vals)))
        if per_repeat:
            out[key] = float(np.mean(per_repeat))
    return out


def level_deltas(base: RunSummary | None, stack: RunSummary | None, levels: list[int] | list[float],
                 open_loop: bool | None = None) -> list[LevelDelta]:
    """One delta per level: `levels` are concurrencies, or offered rates when the runs are open-loop (default:
    whichever the runs measured)."""
    if open_loop is None:
        open_loop = bool((base and base.open_loop) or (stack and stack.open_loop))
    out = []
    for c in levels:
        b_all = [lv for lv in (base.levels if base else []) if lv.stats.level == c]
        s_all = [lv for lv in (stack.levels if stack else []) if lv.stats.level == c]
        # a level stopped mid-way (its deployment died) is listed, but its figures are not a measurement
        b = [lv for lv in b_all if lv.incomplete is None]
        s = [lv for lv in s_all if lv.incomplete is None]
        b_tok = [lv.stats.throughput_tok_s for lv in b]
        s_tok = [lv.stats.throughput_tok_s for lv in s]
        bt = float(np.mean(b_tok)) if b_tok else None
        st = float(np.mean(s_tok)) if s_tok else None
        delta = 100.0 * (st - bt) / bt if bt and st is not None else None
        ci = _side_interval(b, s) if delta is not None else None
        verdict = "missing" if delta is None else ci.verdict if ci else "no interval"

        def mean(levels: list[LevelSummary], f) -> float | None:
            vals = [f(lv) for lv in levels if f(lv) is not None]
            return float(np.mean(vals)) if vals else None

        b_cores, b_client = _cores(b)
        s_cores, s_client = _cores(s)
        out.append(LevelDelta(
            concurrency=0 if open_loop else int(c), rate=float(c) if open_loop else None,
            baseline_tok_s=bt, stack_tok_s=st, delta_pct=delta, ci=ci,
            noise_pct=ci.half_width_pct if ci else None, verdict=verdict,
            baseline_not_steady=_unsteady(b), stack_not_steady=_unsteady(s),
            baseline_modes=[f"r{lv.stats.repeat + 1}: {lv.stats.ttft_modes.text()}" for lv in b if lv.stats.ttft_modes],
            stack_modes=[f"r{lv.stats.repeat + 1}: {lv.stats.ttft_modes.text()}" for lv in s if lv.stats.ttft_modes],
            baseline_ttft_p95_ms=mean(b, lambda lv: lv.stats.ttft_ms.p95),
            stack_ttft_p95_ms=mean(s, lambda lv: lv.stats.ttft_ms.p95),
            baseline_goodput=mean(b, lambda lv: lv.stats.goodput), stack_goodput=mean(s, lambda lv: lv.stats.goodput),
            baseline_good_rps=mean(b, lambda lv: lv.stats.good_rps),
            stack_good_rps=mean(s, lambda lv: lv.stats.good_rps),
            baseline_cpu_cores=b_cores, stack_cpu_cores=s_cores,
            baseline_client_cores=b_client, stack_client_cores=s_client,
            baseline_e2e_p95_ms=mean(b, lambda lv: lv.stats.e2e_ms.p95),
            stack_e2e_p95_ms=mean(s, lambda lv: lv.stats.e2e_ms.p95),
            scheduled_rate=mean(b + s, lambda lv: lv.stats.scheduled_rate),
            baseline_achieved_rate=mean(b, lambda lv: lv.stats.achieved_rate),
            stack_achieved_rate=mean(s, lambda lv: lv.stats.achieved_rate),
            invocations=sorted({lv.invocation for lv in b + s}),
            baseline_gpu=gpu_means(b), stack_gpu=gpu_means(s),
            incomplete=[f"{side} r{lv.stats.repeat + 1}: {lv.incomplete} ({lv.stats.sent} sent)"
                        for side, levels in (("baseline", b_all), ("stack", s_all)) for lv in levels
                        if lv.incomplete],
        ))
    return out


def _unsteady(levels: list[LevelSummary]) -> list[str]:
    return [f"r{lv.stats.repeat + 1}: " + "; ".join(lv.stats.steady.reasons) + " — likely cause: "
            + likely_cause(lv.stats.steady, lv.stats.ttft_modes, lv.client.starved) for lv in levels
            if lv.stats.steady.steady is False]


def settings_diff(a: AppliedConfig, b: AppliedConfig) -> list[str]:
    """Engine settings both deployments must have applied identically (from /v1/models and the engine log)."""
    diffs = []
    for field in ("max_model_len", "kv_cache_tokens", "max_concurrency", "tensor_parallel_size"):
        va, vb = getattr(a, field), getattr(b, field)
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


def _gpu_host() -> dict | None:
    from harness.gpus import host_gpus

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


def run_compare(stack: Stack, profile: LoadProfile, writer: RunWriter, console: Console, repeats: int,
                allow_mismatch: bool, plan: ResumePlan | None = None) -> CompareSummary:
    """The baseline, then the stack (harness.session.baseline_then_stack), and the deltas between them.
    plan: a resumed compare; a side it measured completely is not deployed again, the other continues after
    its last complete level."""
    targets = sides(stack)
    baseline = targets[0][1]
    versions = check_versions(baseline, stack, allow_mismatch)
    for label, run in (plan.prior.items() if plan else ()):  # before anything is deployed again
        if versions[label] != run.engine_version:
            raise ResumeRefused(f"cannot resume: the {label}'s engine is now version {versions[label]}, the first "
                                f"invocation measured {run.engine_version}")
    summary = CompareSummary(
        run_id=writer.run_id, stack=stack.kind, baseline_stack=baseline.kind, in_request_path=stack.in_request_path,
        renames=stack.metric_aliases(),
        shape=stack.shape(), published=stack.published() if study_comparable(profile.name, stack.settings.model)
        else None, model=stack.settings.model, devices=list(stack.settings.devices), gpu_host=_gpu_host(),
        profile=profile.name, repeats=repeats, versions=versions,
        version_match=versions["baseline"] == versions["stack"],
        applied={}, settings_match=False, settings_mismatches=[], options=dict(stack.settings.options),
        scrape_policy=profile.scrape, slo=profile.slo, invocations=(plan.invocation if plan else 0) + 1,
        emulated_step=profile.engine.step,
    )

    def keep(measured: Sides) -> None:
        summary.runs, summary.failures = dict(measured.runs), dict(measured.failures)
        for label, run in measured.runs.items():
            if label not in measured.failures:
                summary.applied[label] = run.applied
                summary.versions[label] = run.engine_version  # the live answer beats the declared one
        summary.status = "failed" if "baseline" in measured.failures else summary.status
        writer.write_json("compare.json", summary.model_dump())

    measured = baseline_then_stack(targets, profile, writer, console, repeats, plan, after_side=keep)
    keep(measured)
    settle(summary, profile, read_jsonl(writer.dir / "scrapes.jsonl"), measured.live, stack.observability_note(),
           allow_mismatch)
    writer.write_json("compare.json", summary.model_dump())
    return summary


def settle(summary: CompareSummary, profile: LoadProfile, scrapes: list[dict], live: dict,
           note: str | None, allow_mismatch: bool) -> CompareSummary:
    """Everything a compare concludes once both sides' runs are in `summary.runs` (measured here, or unpacked
    from a cluster's load Jobs): versions, settings, the per-level deltas, the audit and the status."""
    summary.version_match = summary.versions.get("baseline") == summary.versions.get("stack")
    if not summary.version_match and not allow_mismatch:
        summary.failures["versions"] = f"live versions differ: {summary.versions}"
    if "baseline" in summary.applied and "stack" in summary.applied:
        summary.settings_mismatches = settings_diff(summary.applied["baseline"], summary.applied["stack"]) \
            + model_diff(summary.model, summary.applied)
        summary.settings_match = not summary.settings_mismatches
    summary.levels = level_deltas(summary.runs.get("baseline"), summary.runs.get("stack"), profile.levels(),
                                  profile.open_loop)
    summary.audit = audit_from_scrapes(scrapes, live, summary.stack, summary.renames or (), note)
    summary.status = "failed" if summary.failures else "complete"
    return summary
