"""One deployment's session: place the client, deploy, wait, verify, warn about ports beyond loopback, sweep.
`run` goes through `deploy_and_measure`; `compare`, `audit` and `compare --resume` through
`baseline_then_stack`, which runs it for each side in turn."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from harness.analysis.startup import engine_log_phases
from harness.errors import LayerbenchError
from harness.load.gpu_telemetry import VramGuard
from harness.measure.live import live_facts, refresh_logs
from harness.measure.resume import ResumeRefused
from harness.measure.run import Run, Side, Windows
from harness.measure.sweep import measure, summary_file
from harness.profile.schema import LoadProfile
from harness.schemas import LiveFacts, RunSummary
from stacks.base import Stack


def place(profile: LoadProfile) -> dict:
    """Client priority and cores before anything is deployed (deployments inherit neither); for run.json."""
    from harness.host.placement import apply

    p = apply(profile.client_nice, profile.client_cpus)
    return {**p.model_dump(), "sentence": p.sentence()}


def exposure(stack: Stack) -> list[str]:
    """Listening sockets of the deployment beyond 127.0.0.1 / ::1, as 'address:port (process)'."""
    return live_facts(stack).non_loopback


# What runs against a ready deployment: `harness.measure.sweep.measure` (the profile's levels), or another search over
# levels with its signature (`make capacity`): (stack, run, summary, windows) -> the summary.
SweepFn = Callable[[Stack, Run, RunSummary, Windows], RunSummary]


def deploy_and_measure(stack: Stack, run: Run, side: Side, sweep: SweepFn = measure) -> RunSummary:
    """Deploy (if needed), wait, verify, sweep. The caller owns teardown via the stack's context manager.
    side.prior: what an earlier invocation (or, in a compare of several pairs, an earlier deployment of this side)
    measured on this side; its complete levels are kept and skipped, and the deployment must report the same
    engine version and applied settings. side.pair: which of a compare's deployment pairs this is (its windows
    are numbered after the earlier pairs'); None outside such a compare."""
    r = make_ready(stack, run, side)
    return sweep(stack, run, r.summary, r.windows)


@dataclass
class Ready:
    """A deployment that answers, verified, with the summary its windows go into and what is left to measure."""

    summary: RunSummary
    windows: Windows  # where its windows go: (repeat, level) measured before, a later pair's numbering


def make_ready(stack: Stack, run: Run, side: Side) -> Ready:
    """Deploy, wait, verify the engine against `side.prior`, record the deployment in run.json."""
    profile, writer, say, label, prior, pair = run.profile, run.writer, run.out.say, side.label, side.prior, side.pair
    writer.write_meta(phase=f"{label}: deploying {stack.kind}")
    t0 = time.monotonic()
    stack.deploy()
    waited = stack.wait_ready(stack.settings.startup_timeout_s)
    ready_s = time.monotonic() - t0  # deploy() included: Ray's cluster starts there
    ready_at = datetime.now()  # naive local time, as vLLM's log timestamps are
    start = stack.describe().get("engine_start")  # every local vLLM starts cold (stacks.base.engine_env.cold_cache)
    say(f"[green]{label}: {stack.kind} ready[/] in {waited:.1f}s" + (f" ({start})" if start else "")
                  + f" at {stack.endpoint().base_url}")
    if profile.server_placement == "fixed":
        from harness.host.placement import fix_threads

        say(fix_threads(sorted(p.pid for ps in stack.processes().values() for p in ps)))
    if open_ports := exposure(stack):
        say(f"[bold yellow]warning:[/] {label} {stack.kind} listens beyond loopback: "
                      f"{', '.join(open_ports)}" + (f". {stack.exposure_hint}" if stack.exposure_hint else ""))
    summary = RunSummary(run_id=writer.run_id, label=label, stack=stack.kind,
                         engine_version=stack.engine_version(), applied=stack.verify_config(),
                         profile=profile.name, exposed_ports=open_ports,
                         layer_notes={m.key: m.note for m in stack.layer_metrics()},
                         layer_spans={m.key: m.span_ms for m in stack.layer_metrics() if m.span_ms})
    n_repeats = run.n_repeats()
    skip: frozenset[tuple[int, float]] = frozenset()
    if prior is not None:
        changed = [f"{what}: was {a}, now {b}" for what, a, b in (
            ("engine version", prior.engine_version, summary.engine_version),
            ("applied settings", prior.applied.model_dump(), summary.applied.model_dump())) if a != b]
        if changed:
            raise ResumeRefused(f"cannot resume: {label} {stack.kind} differs from the first invocation: "
                                + "; ".join(changed))
        for lv in prior.levels:  # levels stopped early stay as history and are measured again
            summary.add(lv)
        summary.scrapes, summary.scrape_gaps = prior.scrapes, prior.scrape_gaps
        summary.scrape_gap_reasons = dict(prior.scrape_gap_reasons)
        summary.calibration = prior.calibration
        summary.profiled, summary.profile_note = list(prior.profiled), prior.profile_note
        summary.profiled_s = prior.profiled_s
        skip = frozenset((lv.stats.repeat, lv.stats.level) for lv in prior.levels if lv.incomplete is None)
    first = (pair or 0) * n_repeats
    if side.profile_only:  # every window of this deployment's numbering is skipped: only the profiled ones run
        skip = frozenset((rep, c) for rep in range(first, first + n_repeats) for c in profile.levels())
    key = (f"{label} profiled pass" if side.profile_only else
           label if pair is None else f"{label} pair {pair + 1}")  # None: the only pair
    logs = stack.log_locations()
    phases = engine_log_phases(logs, waited, ready_at)  # where the start went, from vLLM's own log lines
    deployments = {**writer.meta.get("deployments", {}), key: {
        **stack.describe(), "engine_version": summary.engine_version, "applied": summary.applied.model_dump(),
        "gpus": list(stack.settings.devices),
        "startup_s": round(waited, 1), "ready_s": round(ready_s, 1),
        "pids": sorted(p.pid for ps in stack.processes().values() for p in ps),
        "logs": {k: str(v) for k, v in logs.items()}, **({"start_phases": phases} if phases else {})}}
    model = stack.settings.model
    writer.write_meta(deployments=deployments, **({"model": model.model_dump(mode="json")} if model else {}))
    return Ready(summary, Windows(skip=skip, first_repeat=first, pair=pair or 0,
                                  calibrate=side.calibrate, profile=side.profile))




@dataclass
class Sides:
    """What `baseline_then_stack` measured: per side label, its run summary and live facts, or why it failed."""

    runs: dict[str, RunSummary] = field(default_factory=dict)
    live: dict[str, LiveFacts] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


def sides(stack: Stack) -> list[tuple[str, Stack]]:
    """The stack's version-matched baseline first, then the stack."""
    baseline = stack.baseline()
    if baseline is None:
        raise LayerbenchError(f"stack {stack.kind} names no baseline")
    return [("baseline", baseline), ("stack", stack)]


def baseline_then_stack(targets: list[tuple[str, Stack]], run: Run, after_side: Callable[[Sides], None] | None = None,
                        keep_going: bool = True, sweep: SweepFn = measure,
                        profiles: dict[str, LoadProfile] | None = None) -> Sides:
    """Deploy, measure and tear down each target in turn (`sides(stack)`, and for an audit the stack's other
    shapes after it): one at a time, the first torn down and verified gone before the next starts, as on a
    host with one accelerator. A baseline that fails stops everything (nothing to compare against); a later
    side that fails is recorded, with what it measured before, and the next side still runs.
    run.plan: a resumed compare's; a side it measured completely is not deployed again. after_side: called after
    each side (deployed or taken from the plan), so the caller can write what it has. keep_going=False: stop at
    the first side that fails. sweep: what runs against each ready deployment (default: the profile's levels).
    profiles: a target's own load profile, by label (a shape sweep's); the others send the run's."""
    out, plan, writer, say = Sides(), run.plan, run.writer, run.out.say
    # one accelerator's worth of discipline: the next deployment starts only once the last one's GPU memory is back
    guard = VramGuard(sorted({d for _, t in targets for d in getattr(getattr(t, "settings", None), "devices", [])}))
    previous: str | None = None
    for label, target in targets:
        prior = plan.prior.get(label) if plan else None
        if plan and prior is not None and plan.side_done(label):
            say(f"{label} {target.kind}: every level was measured before; not deployed again")
            prior.status = "complete"  # its folder was marked with the interrupted invocation's status
            out.runs[label] = prior
            if after_side is not None:
                after_side(out)
            continue
        try:
            if previous is not None:
                guard.wait_released(previous)
            previous = f"{label} {target.kind}"
            with target:
                mine = run.with_profile(profiles[label]) if profiles and label in profiles else run
                out.runs[label] = deploy_and_measure(target, mine, Side(label, prior), sweep)
                out.runs[label].status = "complete"  # each side says how it ended (summary.csv's side_status)
                out.live[label] = live_facts(target)
            refresh_logs(out.live[label], target)
        except ResumeRefused:
            raise
        except LayerbenchError as e:
            out.failures[label] = str(e)
            if label == "baseline":
                raise LayerbenchError(f"baseline {target.kind} failed: {e}") from None
            say(f"[red]{label} {target.kind} failed:[/] {e}")
        finally:
            partial = writer.dir / summary_file(label, target.kind)
            if label not in out.runs and partial.exists():  # died mid-run: keep what was measured
                out.runs[label] = RunSummary.model_validate_json(partial.read_text())
                out.runs[label].status = "failed" if label in out.failures else "interrupted"
            if after_side is not None:
                after_side(out)
        if out.failures and not keep_going:
            break
    return last_released(guard, previous, out)


def last_released(guard: VramGuard, previous: str | None, out: Sides) -> Sides:
    """`out`, once the last deployment's GPU memory is back; if it is not, the run says so."""
    try:
        if previous is not None:
            guard.wait_released(previous)
    except LayerbenchError as e:
        out.failures["gpu memory"] = str(e)
    return out
