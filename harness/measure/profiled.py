"""One more window per level after a side's judged ones, with every process of the deployment and the load client
sampled by py-spy (harness.load.profiler): the same load as a judged window, its requests kept out of every
statistic and out of requests.jsonl, its throughput set beside the judged windows' so the profiler's cost shows.
Nothing here runs inside a judged window: the sweep calls it after its last one, on a deployment that stays up."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis.profiles import parse_collapsed, process_profile, speedscope
from harness.load import eventloop
from harness.load.profiler import Profiler, Sampled, pyspy
from harness.schemas import level_text
from harness.schemas.profiles import ProcessProfile, ProfiledLevel

if TYPE_CHECKING:
    from harness.measure.sweep import SweepRun

PROFILES_DIR = "profiles"


def profile_levels(sweep: SweepRun) -> None:
    """Every measured level once more, profiled, into the side's summary (RunSummary.profiled)."""
    s = sweep.summary
    binary = pyspy()
    if binary is None:
        s.profile_note = "not profiled: py-spy not found beside this Python or on PATH (make setup installs it)"
        return
    profiler = Profiler(sweep.writer.dir / PROFILES_DIR, binary)
    s.profile_note = profiler.describe()
    t0 = time.monotonic()
    for c in sweep.levels:
        sweep.where = f"{level_text(c, sweep.profile.open_loop)}, profiled (not judged)"
        sweep.writer.write_meta(phase=f"{s.label}: {sweep.where}")
        s.profiled.append(_profiled(sweep, profiler, c))
        sweep.save()
    s.profiled_s += time.monotonic() - t0  # what the diagnosis cost this side (a sequential compare's budget)


def _profiled(sweep: SweepRun, profiler: Profiler, c: float) -> ProfiledLevel:
    stack, s = sweep.stack, sweep.summary
    # the window's files' names: `stack-c4`, or `stack-r2.5` for an open-loop level (its text, `2.5 req/s`, holds a
    # slash, which made a folder of it: every open-loop profiled window failed to write its py-spy log)
    name = f"{s.label}-{'r' if sweep.profile.open_loop else 'c'}{c:g}"
    snaps: list[dict[int, tuple[str, float]]] = []
    kept: list[dict] = []

    def cpu() -> dict[int, tuple[str, float]]:  # the runner reads it as the window opens and as it closes
        snap = stack.process_cpu()
        snaps.append(snap)
        return snap

    busy = _busy_labels(s, c)

    def opened() -> None:  # before the runner's first CPU reading: the processes are listed here
        procs = {pid: label for pid, (label, _) in stack.process_cpu().items() if busy is None or label in busy}
        procs[os.getpid()] = "load client"
        client0[0], span[0] = _own_cpu(), time.perf_counter_ns()
        profiler.start(procs, name)
        split.open()

    client0, span = [0.0], [0, 0]
    rep = max((lv.stats.repeat for lv in s.levels), default=0)
    split = sweep.split.begin(c, rep)
    run = eventloop.run(sweep.driver.measure(c, rep, lambda rec: None, lambda rec: None, cpu, opened))
    run = split.end(run, kept.append, opened=bool(profiler.running))
    client_s = _own_cpu() - client0[0]
    sampled = profiler.stop()
    span[1] = time.perf_counter_ns()
    own, profiler.own_cpu_s = profiler.own_cpu_s, 0.0
    done = [r for r in run.records if r.get("ok")]
    tokens = sum(r.get("output_tokens") or 0 for r in done)
    judged = [lv.stats.throughput_tok_s for lv in s.levels if lv.stats.level == c and not lv.incomplete]
    before, after = (snaps[0], snaps[-1]) if len(snaps) >= 2 else ({}, {})
    stacks = {x.pid: parse_collapsed(x.path.read_text(errors="replace")) if x.path is not None else Counter()
              for x in sampled}
    procs = [process_profile(_measured(x, client_s if x.label == "load client" else _used(x.pid, before, after),
                                       run.window_s, sweep.writer.dir), stacks[x.pid], len(done)) for x in sampled]
    level = ProfiledLevel(level=c, window_s=run.window_s, completed=len(done),
                         tok_s=tokens / run.window_s if run.window_s > 0 else 0.0,
                         judged_tok_s=sum(judged) / len(judged) if judged else None, profiler_cpu_s=own,
                         profiler=f"{s.profile_note}; {profiler.last_rate} Hz a process here",
                         processes=procs, sampled_from_ns=span[0],
                         sampled_to_ns=span[1])
    by_process = {f"{x.label} ({x.pid})": stacks[x.pid] for x in sampled if stacks[x.pid]}
    (profiler.folder / f"{name}.speedscope.json").write_text(json.dumps(speedscope(by_process, name)))
    return level


BUSY_CORES = 0.02  # a process below this in the judged windows is not sampled: its samples would cost, not tell


def _busy_labels(s, c: float) -> set[str] | None:
    """The labels of the processes that used at least BUSY_CORES in the side's judged windows at the level (None:
    no judged window to tell, so every process)."""
    at = [lv for lv in s.levels if lv.stats.level == c and lv.window_s > 0]
    if not at:
        return None
    return {label for label, cpu in at[-1].process_cpu_s.items() if cpu / at[-1].window_s >= BUSY_CORES}


def _used(pid: int, before: dict, after: dict) -> float:
    """A process's CPU seconds between the window's two readings (stack.process_cpu: pid -> (label, seconds))."""
    return max(0.0, after.get(pid, ("", 0.0))[1] - before.get(pid, ("", 0.0))[1])


def _measured(x: Sampled, cpu_s: float, window_s: float, run_dir: Path) -> ProcessProfile:
    return ProcessProfile(pid=x.pid, label=x.label, cpu_s=cpu_s, cores=cpu_s / window_s if window_s > 0 else 0.0,
                          runnable=x.runnable, why_not=x.why_not,
                          collapsed=str(x.path.relative_to(run_dir)) if x.path is not None else None)


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system
