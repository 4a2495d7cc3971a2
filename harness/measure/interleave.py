"""A compare's pairs with both deployments up at once (profile `deployments: interleaved`): at each level, the
baseline's and the stack's windows run in a random order of their own, so the host's drift between them is
seconds, not a sweep. The deployment stays the unit of replication (a pair is still two fresh deployments); what
changes is that both are measured under the same minutes of the host.

A window is only clean while the other side is idle: its engine and layer still hold cores, timers and memory
bandwidth. So the idle side's CPU is read around every window, and a window during which it used more than
IDLE_CORES is measured again (up to TRIES in all; the last try is kept, its idle figure stated). Only where both
fit: the GPU-like engine and hosts without GPUs (nothing to share but cores), or GPUs whose memory the user split
(gpu_memory_utilization <= SHARED_GPU_MEMORY)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import ExitStack

from rich.console import Console

from harness.analysis.conclude import pair_order
from harness.errors import LayerbenchError
from harness.load.gpu_telemetry import VramGuard
from harness.measure.live import live_facts, refresh_logs
from harness.measure.pairs import pair_targets
from harness.measure.resume import ResumePlan
from harness.measure.session import Sides, last_released, make_ready
from harness.measure.sweep import SweepRun, progress_bars, save, summary_file
from harness.profile.schema import IDLE_CORES, SHARED_GPU_MEMORY, LoadProfile
from harness.results import RunWriter
from harness.schemas import RunSummary
from stacks.base import Stack

TRIES = 3


def cannot_interleave(stack: Stack, profile: LoadProfile) -> str | None:
    """Why the pair's two deployments cannot be up at once here, or None."""
    if profile.engine.step is not None or not stack.settings.devices:
        return None
    if profile.engine.gpu_memory_utilization > SHARED_GPU_MEMORY:
        return (f"deployments: interleaved keeps a baseline and a stack up at once on GPUs "
                f"{','.join(map(str, stack.settings.devices))}, and each asks for gpu_memory_utilization "
                f"{profile.engine.gpu_memory_utilization}: set engine.gpu_memory_utilization to "
                f"{SHARED_GPU_MEMORY} or less, or use deployments: sequential")
    return None


def busy_cores(stack: Stack) -> Callable[[], float]:
    """A reading of the deployment's CPU seconds; call the result for the cores used since."""
    def total() -> float:
        return sum(cpu for _, cpu in stack.process_cpu().values())

    t0, cpu0 = time.monotonic(), total()
    return lambda: (total() - cpu0) / max(time.monotonic() - t0, 1e-9)


def window(run: SweepRun, idle: Stack, rep: int, c: float, n_repeats: int, first_repeat: int,
           console: Console) -> None:
    """One measured window of `run`'s side while `idle` waits; measured again while the idle side was busy."""
    for attempt in range(TRIES):
        run.attempt = attempt
        used = busy_cores(idle)
        run.level(rep, c, n_repeats, first_repeat)
        lv = run.summary.levels[-1]
        lv.attempt, lv.idle_cores = attempt, round(used(), 4)
        if lv.idle_cores <= IDLE_CORES or attempt == TRIES - 1:
            save(run.writer, run.summary)
            return
        run.summary.drop_last()
        run.summary.remeasured += 1
        console.print(f"[yellow]{run.summary.label} {run.where}: the idle side used {lv.idle_cores:.3f} cores "
                      f"(> {IDLE_CORES}); measuring the window again[/]")


def measure_interleaved(stack: Stack, pairs: int, profile: LoadProfile, writer: RunWriter, console: Console,
                        repeats: int, plan: ResumePlan | None = None,
                        after_side: Callable[[Sides], None] | None = None) -> Sides:
    """Every pair: both deployed (in the counterbalanced order harness.measure.pairs gives), both warmed, then each
    level's windows in a random order seeded by the run and the pair. What fails is handled as in
    harness.measure.pairs.measure_pairs: a baseline stops the compare, a stack ends it with what was measured kept."""
    if why := cannot_interleave(stack, profile):
        raise LayerbenchError(why)
    out = Sides()
    guard = VramGuard(list(stack.settings.devices))
    previous: str | None = None
    for k, first in enumerate(pair_order(pairs)):
        targets = dict(zip(("baseline", "stack"), pair_targets(stack, k), strict=True))
        prior = {label: out.runs.get(label) or (plan.prior.get(label) if plan else None) for label in targets}
        if plan is not None and all(p is not None and plan.deployment_done(label, k, repeats)
                                    for label, p in prior.items()):
            console.print(f"pair {k + 1}: measured before; not deployed again")
            out.runs.update({label: p for label, p in prior.items() if p is not None})
            continue
        if previous is not None:
            guard.wait_released(previous)
        previous = f"pair {k + 1}"
        console.print(f"[bold]pair {k + 1} of {pairs}: baseline and {stack.kind} up together, windows interleaved[/]")
        at = ["baseline"]  # the side being deployed or measured: the one a failure belongs to
        try:
            _pair(targets, list(targets) if first > 0 else list(targets)[::-1], k, pairs, profile, writer, console,
                  repeats, prior, plan.invocation if plan else 0, out, random.Random(f"{writer.run_id}:{k}"),
                  at)
        except LayerbenchError as e:
            label = at[0]
            out.failures[label] = f"pair {k + 1}: {e}"
            if label == "baseline":
                raise LayerbenchError(f"baseline failed in pair {k + 1}: {e}") from None
            console.print(f"[red]pair {k + 1} failed:[/] {e}")
        finally:
            for label, target in targets.items():
                partial = writer.dir / summary_file(label, target.kind)
                if partial.exists() and (label not in out.runs or label in out.failures):
                    out.runs[label] = RunSummary.model_validate_json(partial.read_text())
            if after_side is not None:
                after_side(out)
        if out.failures:
            break
        cal = out.runs["baseline"].calibration
        if cal is not None and cal.left_out:
            profile = profile.with_levels(cal.kept)
    for label, run in out.runs.items():
        run.status = "failed" if label in out.failures else "complete"
    return last_released(guard, previous, out)


def _pair(targets: dict[str, Stack], deploy_order: list[str], k: int, pairs: int, profile: LoadProfile,
          writer: RunWriter, console: Console, repeats: int, prior: dict[str, RunSummary | None], invocation: int,
          out: Sides, rng: random.Random, at: list[str]) -> None:
    """One pair, both sides up: deploy, warm, interleave every level's windows, finish both, tear both down."""
    calibrate = k == 0 and profile.engine.step is not None and (
        prior["baseline"] is None or prior["baseline"].calibration is None)
    runs: dict[str, SweepRun] = {}
    with ExitStack() as up:
        skip: dict[str, frozenset[tuple[int, float]]] = {}
        for label in deploy_order:
            at[0] = label
            target = up.enter_context(targets[label])
            ready = make_ready(target, profile, writer, label, console, repeats, prior[label],
                               k if pairs > 1 else None, calibrate and label == "baseline")
            skip[label] = ready.skip
            runs[label] = SweepRun(target, profile, writer, ready.summary, invocation, None, k,
                                   calibrate and label == "baseline")
            out.runs[label] = ready.summary
        reps = range(k * repeats, (k + 1) * repeats)
        with ExitStack() as watching:
            for run in runs.values():
                watching.enter_context(run.scraper)
                watching.enter_context(run.sampler)
                watching.enter_context(run.gpus)
                watching.enter_context(run.split)
            progress = watching.enter_context(progress_bars(console))
            for label, run in runs.items():
                run.start(progress, [(r, c) for r in reps for c in profile.levels() if (r, c) not in skip[label]])
            try:
                _windows(runs, targets, reps, skip, repeats, k, console, rng, at)
            except KeyboardInterrupt:  # both sides say where they stopped
                for run in runs.values():
                    run.summary.stopped = f"interrupted by Ctrl-C / SIGTERM at {run.where}"
                    save(writer, run.summary)
                raise
        for label, run in runs.items():
            run.finish()
            out.live[label] = live_facts(targets[label])
    for label, target in targets.items():
        refresh_logs(out.live[label], target)


def _windows(runs: dict[str, SweepRun], targets: dict[str, Stack], reps: range,
             skip: dict[str, frozenset[tuple[int, float]]], repeats: int, k: int, console: Console,
             rng: random.Random, at: list[str]) -> None:
    for label, run in runs.items():
        if run.summary.warmup_sweep:
            at[0] = label
            run.warmup_sweep()
    runs["stack"].levels = list(runs["baseline"].levels)  # the baseline's calibration decides for both
    for rep in reps:
        for c in runs["baseline"].levels:
            for label in rng.sample(list(runs), len(runs)):
                if (rep, c) not in skip[label]:
                    at[0] = label
                    other = targets["stack" if label == "baseline" else "baseline"]
                    window(runs[label], other, rep, c, repeats, k * repeats, console)
