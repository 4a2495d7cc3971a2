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

from harness.analysis.conclude import pair_order
from harness.errors import LayerbenchError
from harness.load.gpu_telemetry import VramGuard
from harness.measure.live import live_facts, refresh_logs
from harness.measure.pairs import pair_targets
from harness.measure.run import Run, Side, Windows
from harness.measure.session import Sides, last_released, make_ready
from harness.measure.sweep import SweepRun, save, summary_file
from harness.profile.schema import IDLE_CORES, SHARED_GPU_MEMORY, LoadProfile
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


def window(sweep: SweepRun, idle: Stack, rep: int, c: float, reps: range, say: Callable[..., None]) -> None:
    """One measured window of `sweep`'s side while `idle` waits; measured again while the idle side was busy.
    reps: the pair's repeats (their count, and the first one's number)."""
    for attempt in range(TRIES):
        sweep.attempt = attempt
        used = busy_cores(idle)
        sweep.level(rep, c, len(reps), reps.start)
        lv = sweep.summary.levels[-1]
        lv.attempt, lv.idle_cores = attempt, round(used(), 4)
        if lv.idle_cores <= IDLE_CORES or attempt == TRIES - 1:
            save(sweep.writer, sweep.summary)
            return
        sweep.summary.drop_last()
        sweep.summary.remeasured += 1
        say(f"[yellow]{sweep.summary.label} {sweep.where}: the idle side used {lv.idle_cores:.3f} cores "
            f"(> {IDLE_CORES}); measuring the window again[/]")


def measure_interleaved(stack: Stack, pairs: int, run: Run, after_side: Callable[[Sides], None] | None = None) -> Sides:
    """Every pair: both deployed (in the counterbalanced order harness.measure.pairs gives), both warmed, then each
    level's windows in a random order seeded by the run and the pair. What fails is handled as in
    harness.measure.pairs.measure_pairs: a baseline stops the compare, a stack ends it with what was measured kept."""
    if why := cannot_interleave(stack, run.profile):
        raise LayerbenchError(why)
    out, plan, writer, say, repeats = Sides(), run.plan, run.writer, run.out.say, run.n_repeats()
    guard = VramGuard(list(stack.settings.devices))
    previous: str | None = None
    for k, first in enumerate(pair_order(pairs)):
        targets = dict(zip(("baseline", "stack"), pair_targets(stack, k), strict=True))
        prior = {label: out.runs.get(label) or (plan.prior.get(label) if plan else None) for label in targets}
        if plan is not None and all(p is not None and plan.deployment_done(label, k, repeats)
                                    for label, p in prior.items()):
            say(f"pair {k + 1}: measured before; not deployed again")
            out.runs.update({label: p for label, p in prior.items() if p is not None})
            continue
        if previous is not None:
            guard.wait_released(previous)
        previous = f"pair {k + 1}"
        say(f"[bold]pair {k + 1} of {pairs}: baseline and {stack.kind} up together, windows interleaved[/]")
        pair = _Pair(run, k, pairs, targets, out)
        try:
            pair.measure(list(targets) if first > 0 else list(targets)[::-1], prior)
        except LayerbenchError as e:
            label = pair.at
            out.failures[label] = f"pair {k + 1}: {e}"
            if label == "baseline":
                raise LayerbenchError(f"baseline failed in pair {k + 1}: {e}") from None
            say(f"[red]pair {k + 1} failed:[/] {e}")
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
            run = run.with_profile(run.profile.with_levels(cal.kept))
    for label, measured in out.runs.items():
        measured.status = "failed" if label in out.failures else "complete"
    return last_released(guard, previous, out)


class _Pair:
    """One pair, both sides up: deploy, warm, interleave every level's windows, finish both, tear both down.
    `at`: the side being deployed or measured, the one a failure belongs to."""

    def __init__(self, run: Run, k: int, pairs: int, targets: dict[str, Stack], out: Sides):
        self.run, self.k, self.pairs, self.targets, self.out = run, k, pairs, targets, out
        self.rng = random.Random(f"{run.writer.run_id}:{k}")
        self.at = "baseline"

    def measure(self, deploy_order: list[str], prior: dict[str, RunSummary | None]) -> None:
        run, k, targets, out = self.run, self.k, self.targets, self.out
        calibrate = k == 0 and run.profile.engine.step is not None and (
            prior["baseline"] is None or prior["baseline"].calibration is None)
        sweeps: dict[str, SweepRun] = {}
        with ExitStack() as up:
            skip: dict[str, frozenset[tuple[int, float]]] = {}
            for label in deploy_order:
                self.at = label
                target = up.enter_context(targets[label])
                mine = calibrate and label == "baseline"
                ready = make_ready(target, run, Side(label, prior[label], k if self.pairs > 1 else None, mine))
                skip[label] = ready.windows.skip
                sweeps[label] = SweepRun(target, run, ready.summary, Windows(pair=k, calibrate=mine))
                out.runs[label] = ready.summary
            repeats = run.n_repeats()
            reps = range(k * repeats, (k + 1) * repeats)
            with ExitStack() as watching:
                for sweep in sweeps.values():
                    watching.enter_context(sweep.scraper)
                    watching.enter_context(sweep.sampler)
                    watching.enter_context(sweep.gpus)
                    watching.enter_context(sweep.split)
                progress = watching.enter_context(run.out.bars())
                for label, sweep in sweeps.items():
                    sweep.start(progress, [(r, c) for r in reps for c in run.profile.levels()
                                           if (r, c) not in skip[label]])
                try:
                    self._windows(sweeps, reps, skip)
                except KeyboardInterrupt:  # both sides say where they stopped
                    for sweep in sweeps.values():
                        sweep.summary.stopped = f"interrupted by Ctrl-C / SIGTERM at {sweep.where}"
                        save(run.writer, sweep.summary)
                    raise
            for label, sweep in sweeps.items():
                sweep.finish()
                out.live[label] = live_facts(targets[label])
        for label, target in targets.items():
            refresh_logs(out.live[label], target)

    def _windows(self, sweeps: dict[str, SweepRun], reps: range,
                 skip: dict[str, frozenset[tuple[int, float]]]) -> None:
        for label, sweep in sweeps.items():
            if sweep.summary.warmup_sweep:
                self.at = label
                sweep.warmup_sweep()
        sweeps["stack"].levels = list(sweeps["baseline"].levels)  # the baseline's calibration decides for both
        for rep in reps:
            for c in sweeps["baseline"].levels:
                for label in self.rng.sample(list(sweeps), len(sweeps)):
                    if (rep, c) not in skip[label]:
                        self.at = label
                        other = self.targets["stack" if label == "baseline" else "baseline"]
                        window(sweeps[label], other, rep, c, reps, self.run.out.say)
