"""Whether this host is idle enough to measure on, checked before a local compare deploys anything.

A compare on the local target runs both deployments and the load client on this host's cores, one side at a time,
and assumes they have the cores to themselves: a layer's cost is a difference of a few percent, and another
process's load moves it. Over one second this probe reads (a) the cores every other process kept busy (/proc/stat's
busy time, minus this process and its children), naming the processes that used the most, and (b) how late a
1 ms sleep wakes (p99), which is what the GPU-like engine's step pacer and the load client's stamps meet.

What it decides, with the figures it measured:
- another process's load of BUSY_WARN cores or more: a warning naming it, and the compare goes on;
- other load of BUSY_REFUSE cores or more, or a wake later than WAKE_REFUSE_MS at p99: refused before anything is
  deployed, unless `--busy-host go` (the levels are then judged by the compare's own host check, which leaves out
  the windows and levels whose emulated step the host stretched).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field

import psutil

from harness.errors import LayerbenchError

PROBE_S = 1.0
# A process above a tenth of a core is named: this 2-core host, idle, read 0.00-0.01 cores of other load in all
# (2026-12-07), so a tenth of a core is something running, not the kernel's own threads.
BUSY_WARN = 0.10
# Half a core. Measured on this project's 2-core host (GPU-like default profile, 2026-12-01, one engine): the bare
# vLLM side used 0.41 cores at c=1 and 0.47 at c=64 (engine core 0.10, worker 0.22, API server 0.15), the Ray
# side 1.5 at c=64, and the load client runs beside them. Another half core leaves the Ray side less than it used, and
# on a core vLLM's CPU worker binds itself to (core 0 on a 2-core host) a busy loop takes half that core's time.
BUSY_REFUSE = 0.5
# A wake 2 ms late at p99 is a fifth of the smallest GPU-like step of the default profile (9.35 ms at c=1), twice
# the host check's 10% tolerance; this 2-core host, idle, wakes 0.12 ms late at p99, and as late beside one
# or two busy loops (the scheduler favours a waking sleeper), so a busy core shows in the load, not here.
WAKE_REFUSE_MS = 2.0
MODES = ("refuse", "warn", "go")  # refuse: stop on a busy host; warn: say so and go on; go: not checked


@dataclass
class Busy:
    pid: int
    name: str
    cores: float


@dataclass
class HostLoad:
    """What the probe measured over `seconds`."""

    cores: int  # the cores this process may run on
    other_cores: float  # cores kept busy by every other process
    wake_p99_ms: float  # how late a 1 ms sleep woke, p99
    seconds: float
    busy: list[Busy] = field(default_factory=list)  # other processes at or above BUSY_WARN cores, busiest first

    def figures(self) -> str:
        named = ", ".join(f"{b.name} (pid {b.pid}) {b.cores:.2f}" for b in self.busy) or "none above " \
            f"{BUSY_WARN:g} core"
        return (f"other processes kept {self.other_cores:.2f} of {self.cores} cores busy over {self.seconds:.1f} s "
                f"(busiest: {named}); a 1 ms sleep woke {self.wake_p99_ms:.2f} ms late at p99")

    def verdict(self) -> str | None:
        """Why this host is too busy to measure on, or None."""
        if self.other_cores >= BUSY_REFUSE:
            return f"other processes hold {self.other_cores:.2f} cores (refused at {BUSY_REFUSE:g})"
        if self.wake_p99_ms >= WAKE_REFUSE_MS:
            return f"a sleep wakes {self.wake_p99_ms:.2f} ms late at p99 (refused at {WAKE_REFUSE_MS:g} ms)"
        return None

    def to_json(self) -> dict:
        return asdict(self)


def _own_pids() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(c.pid for c in me.children(recursive=True))}


def _proc_cpu() -> dict[int, tuple[str, float]]:
    out: dict[int, tuple[str, float]] = {}
    for p in psutil.process_iter(["name"]):
        try:
            t = p.cpu_times()
            out[p.pid] = (p.info["name"] or "?", t.user + t.system)
        except psutil.Error:
            continue
    return out


def busy_s(t) -> float:  # noqa: ANN001 (psutil's cpu_times tuple)
    """A CPU's busy seconds in psutil's cpu_times (/proc/stat): everything but idle and iowait, steal included."""
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)


def _busy_s(cores: list[int]) -> float:
    return sum(busy_s(t) for i, t in enumerate(psutil.cpu_times(percpu=True)) if i in cores)


def _wake_lateness(until: float, late: list[float]) -> None:
    while time.monotonic() < until:
        t = time.perf_counter()
        time.sleep(0.001)
        late.append((time.perf_counter() - t - 0.001) * 1e3)


def probe(seconds: float = PROBE_S) -> HostLoad:
    """Measure the host's other load and wake lateness over `seconds` (this process only sleeps meanwhile)."""
    cores = sorted(os.sched_getaffinity(0))
    own = _own_pids()
    procs0, busy0, mine0, t0 = _proc_cpu(), _busy_s(cores), psutil.Process().cpu_times(), time.monotonic()
    late: list[float] = []
    waker = threading.Thread(target=_wake_lateness, args=(t0 + seconds, late), daemon=True)
    waker.start()
    waker.join()
    procs1, busy1, mine1, wall = _proc_cpu(), _busy_s(cores), psutil.Process().cpu_times(), time.monotonic() - t0
    ours = (mine1.user + mine1.system) - (mine0.user + mine0.system)
    named = sorted((Busy(pid, name, (s - procs0[pid][1]) / wall) for pid, (name, s) in procs1.items()
                    if pid in procs0 and pid not in own), key=lambda b: -b.cores)
    late.sort()
    p99 = late[min(len(late) - 1, int(0.99 * len(late)))] if late else 0.0
    return HostLoad(cores=len(cores), other_cores=round(max(0.0, (busy1 - busy0 - ours) / wall), 3),
                    wake_p99_ms=round(max(0.0, p99), 3), seconds=round(wall, 2),
                    busy=[b for b in named if b.cores >= BUSY_WARN][:5])


def check_host(mode: str, say, measured: HostLoad | None = None) -> HostLoad | None:
    """The probe's figures said (`say`, one line) and, with mode refuse, a busy host refused: LayerbenchError before
    anything is deployed. mode go: not probed (None)."""
    if mode not in MODES:
        raise LayerbenchError(f"--busy-host {mode!r}: one of {', '.join(MODES)}")
    if mode == "go":
        return None
    load = measured or probe()
    why = load.verdict()
    if why and mode == "refuse":
        raise LayerbenchError(f"this host is too busy to measure a layer's cost on: {why}. {load.figures()}. "
                              "Stop what is busy, or pass --busy-host go (BUSY_HOST=go) to measure anyway: the "
                              "compare's host check then leaves out the levels whose step this host stretched")
    if why or load.busy:
        say(f"host busy: {load.figures()}" + (f"; {why}, going on (--busy-host {mode})" if why else ""))
    return load
