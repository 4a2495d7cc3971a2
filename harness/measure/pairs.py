"""A compare's deployments: K pairs of a baseline and a stack, in counterbalanced order (AB, BA, BA, AB, then
again), each deployment fresh (its own ports and log folder) and torn down and verified gone before the next.

Why: on a shared host a whole deployment runs faster or slower than the next for its whole life (measured here
on the 2-core CPU host: about 12-17% at c <= 8, where its processes land on the cores), and the host drifts.
Windows inside one deployment cannot see the first, and a baseline always measured first mixes the second into
the layer's cost. So the deployment is the unit of replication, and the order is balanced so that a linear drift
cancels in the estimate (harness.analysis.verdict.balanced_mean). One sweep per deployment is the cheapest design when a
deployment's start costs about as much as a sweep (Kalibera & Jones, "Rigorous benchmarking in reasonable time",
2013)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from harness.analysis.conclude import pair_order
from harness.errors import LayerbenchError
from harness.load.gpu_telemetry import VramGuard
from harness.measure.live import live_facts, refresh_logs
from harness.measure.resume import ResumeRefused
from harness.measure.run import Run, Side
from harness.measure.session import Sides, deploy_and_measure, last_released
from harness.measure.stopping import SequentialStop
from harness.measure.sweep import summary_file
from harness.schemas import RunSummary
from harness.schemas.compare import DeploymentTime
from stacks.base import Stack
from stacks.base.engine_env import remove_cache, side_cache, side_start


def pair_targets(stack: Stack, k: int) -> tuple[Stack, Stack]:
    """Pair k's fresh deployments, baseline and stack, each with its own ports and log folder."""
    logs = stack.settings.log_dir / f"pair{k + 1}"
    s, b = stack.again(logs / "stack"), stack.again(logs / "baseline").baseline()
    if b is None:
        raise LayerbenchError(f"stack {stack.kind} names no baseline")
    return b, s


def schedule(stack: Stack, pairs: int) -> list[tuple[str, int, Stack]]:
    """(side, pair, a fresh deployment) in the order they run."""
    out: list[tuple[str, int, Stack]] = []
    for k, first in enumerate(pair_order(pairs)):
        b, s = pair_targets(stack, k)
        both = [("baseline", k, b), ("stack", k, s)]
        out += both if first > 0 else both[::-1]
    return out


def with_side_cache(target: Stack, root: Path, pair: int) -> Stack:
    """Give the deployment's vLLM (behind a front, where there is one) its side's compile cache for this compare
    (stacks.base.engine_env.side_cache): kept across the side's deployments, removed at the compare's end."""
    for t in (target, getattr(target, "engine", None)):
        # several engines (stacks.base.replicas): each its own folder, as they compile at once
        for i, e in enumerate(getattr(t, "replicas", None) or [t]):
            if e is not None and hasattr(e, "engine_cache"):
                e.engine_cache = root / f"replica-{i}" if hasattr(t, "replicas") else root
                e.keep_cache, e.engine_start = True, side_start(pair)
    return target


def measure_pairs(stack: Stack, pairs: int, run: Run, after_side: Callable[[Sides], None] | None = None,
                  stop: SequentialStop | None = None) -> Sides:
    """Every deployment of `schedule(stack, pairs)`, each side's windows accumulating in one RunSummary (window
    `repeat` numbers run on across pairs; LevelSummary.pair says which pair). A GPU-like engine's first
    deployment calibrates the levels this host can emulate (harness.analysis.calibrate); the rest measure only those.
    A baseline deployment that fails stops the compare; a stack deployment that fails is recorded, what was
    measured is kept, and no further deployment is made (nothing more could be paired). stop: a sequential
    compare's looks and profiled-window placement (harness.measure.stopping); its look after pair k is taken once
    the pair's last deployment has measured its judged windows, before that deployment is torn down, so that it
    can run the profiled windows if the compare stops there. Without it (a fixed design) the last pair is
    profiled."""
    try:
        return _measure(stack, pairs, run, after_side, stop)
    finally:
        for side in ("baseline", "stack"):
            remove_cache(side_cache(run.writer.run_id, side))


def _measure(stack: Stack, pairs: int, run: Run, after_side: Callable[[Sides], None] | None,
             stop: SequentialStop | None) -> Sides:
    out, plan, writer, say, repeats = Sides(), run.plan, run.writer, run.out.say, run.n_repeats()
    guard = VramGuard(list(stack.settings.devices))
    previous: str | None = None
    interrupted: str | None = None
    if plan is not None and (cal := getattr(plan.prior.get("baseline"), "calibration", None)) and cal.left_out:
        run = run.with_profile(run.profile.with_levels(cal.kept))
    sides_done: dict[int, int] = {}
    done = 0  # complete pairs
    for label, pair, target in schedule(stack, pairs):
        prior = out.runs.get(label) or (plan.prior.get(label) if plan else None)
        sides_done[pair] = sides_done.get(pair, 0) + 1
        last_of_pair = sides_done[pair] == 2
        if plan is not None and prior is not None and plan.deployment_done(label, pair, repeats):
            say(f"{label} {target.kind} pair {pair + 1}: measured before; not deployed again")
            out.runs[label] = prior
            done += last_of_pair
            if last_of_pair and stop is not None and stop(out, pair + 1):
                break
            continue
        if out.failures:  # the stack failed: nothing more can be paired
            break
        other = "stack" if label == "baseline" else "baseline"
        at = When(label, pair + 1, f"{label} pair {pair + 1}" if pairs > 1 else label)
        if stop is None:  # a fixed design: the processes are sampled in the last pair, after its judged windows
            profile: bool | Callable[[RunSummary], bool] = run.profiling and pair == pairs - 1
        elif last_of_pair:
            def profile(summary: RunSummary, label: str = label, k: int = pair + 1, at: When = at) -> bool:
                at.judged = time.monotonic()
                out.runs[label] = summary
                if after_side is not None:
                    after_side(out)
                at.stopped = stop(out, k)
                return at.stopped and stop.profile_at_stop(label)
        else:
            def profile(summary: RunSummary, label: str = label, other: str = other, k: int = pair + 1,
                        at: When = at) -> bool:
                at.judged = time.monotonic()
                return stop.profile_first(label, other, k)
        with_side_cache(target, side_cache(writer.run_id, label), pair)
        calibrate = (pair == 0 and label == "baseline" and run.profile.engine.step is not None
                     and (prior is None or prior.calibration is None))
        try:
            if previous is not None:
                guard.wait_released(previous)
            previous = f"{label} {target.kind} pair {pair + 1}"
            most = f"at most {pairs}" if stop is not None else f"{pairs}"
            say(f"[bold]pair {pair + 1} of {most}: {label} {target.kind}[/]")
            with target:
                measured = deploy_and_measure(target, run, Side(label, prior, pair if pairs > 1 else None, calibrate,
                                                                profile))
                out.runs[label] = measured
                out.live[label] = live_facts(target)
            refresh_logs(out.live[label], target)
            if measured.calibration is not None and measured.calibration.left_out:
                run = run.with_profile(run.profile.with_levels(measured.calibration.kept))
        except KeyboardInterrupt:
            interrupted = label
            raise
        except ResumeRefused:
            raise
        except LayerbenchError as e:
            out.failures[label] = f"pair {pair + 1}: {e}"
            if label == "baseline":
                raise LayerbenchError(f"baseline {target.kind} failed in pair {pair + 1}: {e}") from None
            say(f"[red]{label} {target.kind} failed in pair {pair + 1}:[/] {e}")
        finally:
            partial = writer.dir / summary_file(label, target.kind)
            if partial.exists() and (label not in out.runs or label in out.failures):
                out.runs[label] = RunSummary.model_validate_json(partial.read_text())
            if label in out.runs:
                out.runs[label].status = ("failed" if label in out.failures else
                                          "interrupted" if interrupted == label else "running")
            if after_side is not None:
                after_side(out)
        if stop is not None and label not in out.failures:
            stop.deployed(at.timing(writer, out.runs[label], prior))
        done += last_of_pair and not out.failures
        if last_of_pair and at.stopped:
            break
    if stop is not None and not out.failures:
        for label in ("baseline", "stack"):
            if stop.own_pass(label):
                if previous is not None:
                    guard.wait_released(previous)
                previous = _profiled_pass(stack, label, done, run, out, stop)
                if after_side is not None:
                    after_side(out)
    for label, run_ in out.runs.items():
        if label not in out.failures:
            run_.status = "complete"
    return last_released(guard, previous, out)


class When:
    """When a deployment's judged windows ended (its profile callable was asked), and whether its look stopped."""

    def __init__(self, label: str, pair: int, key: str) -> None:
        self.label, self.pair, self.key = label, pair, key  # key: the deployment's in run.json
        self.t0, self.judged, self.stopped = time.monotonic(), None, False

    def timing(self, writer, summary: RunSummary, prior: RunSummary | None, profile_only: bool = False) \
            -> DeploymentTime:
        end = time.monotonic()
        dep = writer.meta.get("deployments", {}).get(self.key, {})
        ready = float(dep.get("ready_s") or dep.get("startup_s") or 0.0)
        profiled = summary.profiled_s - (prior.profiled_s if prior is not None else 0.0)
        judged_at = self.judged if self.judged is not None else end - profiled
        return DeploymentTime(side=self.label, pair=self.pair, start_s=ready,
                              judged_s=max(0.0, judged_at - self.t0 - ready), profiled_s=profiled,
                              other_s=max(0.0, end - judged_at - profiled), profile_only=profile_only)


def _profiled_pass(stack: Stack, label: str, k: int, run: Run, out: Sides, stop: SequentialStop) -> str:
    """One more warm deployment of the side, its warm-up sweep and profiled windows only: no judged window. Returns
    its name, for the next check that it is gone."""
    b, s = pair_targets(stack, k)
    target = with_side_cache(s if label == "stack" else b, side_cache(run.writer.run_id, label), k)
    prior = out.runs[label]
    at = When(label, k + 1, f"{label} profiled pass")
    previous = f"{label} {target.kind} profiled pass"
    try:
        run.out.say(f"[bold]{label} {target.kind}: profiled pass[/]")
        with target:
            out.runs[label] = deploy_and_measure(target, run, Side(label, prior, k, profile=True, profile_only=True))
    except LayerbenchError as e:  # the verdicts stand; the diagnosis says what it lacks
        out.runs[label] = prior
        stop.state.profiled[label] = f"not profiled: its pass of its own failed: {e}"
        return previous
    stop.deployed(at.timing(run.writer, out.runs[label], prior, True))
    return previous
