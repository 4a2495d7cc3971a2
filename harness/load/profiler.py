"""py-spy on every process of a deployment for one window: one `py-spy record` per process, started just before
the window opens and stopped with SIGINT just after it closes (py-spy then writes what it sampled and exits,
src/main.rs of py-spy 0.4.3: "Stopped sampling because Control-C pressed"). On-CPU samples only (py-spy's
default without --idle), --nonblocking so a sample never pauses the process it reads (py-spy's README: the
default pauses it briefly), raw collapsed stacks (--format raw), 100 Hz.

Attaching needs ptrace rights over a process that is not py-spy's own child: CAP_SYS_PTRACE, or
kernel.yama.ptrace_scope 0 (or no Yama) for a process of the same user (Documentation/admin-guide/LSM/Yama.rst:
1 allows only descendants, 2 only CAP_SYS_PTRACE, 3 nobody). In a container that is `--cap-add SYS_PTRACE`
(py-spy's README, "Docker")."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.load import perf
from harness.load.topology import thread_files

RATE_HZ = 100
# samples per second across every process of a window: a py-spy sample of a Ray Serve process (many threads, deep
# stacks) cost ~0.5 ms of CPU here, and fifteen processes at 100 Hz took 0.75 of this host's 2 cores and 30-42% of
# the profiled window's throughput (2026-12-03); at this budget the rate per process falls as processes add up
SAMPLES_PER_S = 200
MIN_RATE_HZ = 10
STOP_S = 10.0  # py-spy writes its file within this after SIGINT
CAP_SYS_PTRACE = 19  # linux/capability.h
Sched = dict[int, tuple[int, int]]  # thread id -> (ns on a CPU, ns runnable but waiting for one)


@dataclass
class Sampled:
    """One process's samples: the collapsed stacks' file, or why there is none."""

    pid: int
    label: str
    path: Path | None
    why_not: str | None = None
    runnable: float | None = None  # its busiest thread's share of the window on a CPU or waiting for one


def schedstat(pid: int) -> Sched:
    """Each thread's time on a CPU and waiting in a run queue, in ns: /proc/<pid>/task/<tid>/schedstat's first
    two fields (Documentation/scheduler/sched-stats.rst). A thread that is always one or the other wanted a whole
    core the whole time, however much CPU the host let it have."""
    out: Sched = {}
    for tid, raw in thread_files(pid, "schedstat").items():
        try:
            run, wait = raw.split()[:2]
            out[tid] = (int(run), int(wait))
        except ValueError:
            continue
    return out


def busiest(before: Sched, after: Sched, span_ns: int) -> float | None:
    """The largest share of `span_ns` any one thread spent on a CPU or waiting for one."""
    if span_ns <= 0 or not after:
        return None
    shares = [(run + wait - sum(before.get(tid, (run, wait)))) / span_ns for tid, (run, wait) in after.items()]
    return max(shares, default=None)


def pyspy() -> str | None:
    """The py-spy beside this Python (the client's environment installs it), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "py-spy"
    return out or "py-spy"  # "py-spy 0.4.3"


def attach_refused() -> str | None:
    """Why this process's children could not attach to its other children, or None where they can. Root is not
    enough: a container's root lacks CAP_SYS_PTRACE by default (Docker's default capability set,
    https://docs.docker.com/engine/containers/run/#runtime-privilege-and-linux-capabilities)."""
    try:
        cap_eff = next(int(line.split()[1], 16) for line in Path("/proc/self/status").read_text().splitlines()
                       if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        cap_eff = 0
    if cap_eff >> CAP_SYS_PTRACE & 1:
        return None
    try:
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return None  # no Yama: classic ptrace rules, a process may trace its own user's processes
    if scope == 0:
        return None
    return (f"kernel.yama.ptrace_scope is {scope} and this user has no CAP_SYS_PTRACE: py-spy cannot attach to "
            "the deployment's processes (`sudo sysctl kernel.yama.ptrace_scope=0`, or run as root; in a container, "
            "`--cap-add SYS_PTRACE`)")


class Profiler:
    """py-spy on each given process for one window, into `folder`: start() before the window, stop() after it."""

    def __init__(self, folder: Path, binary: str, rate: int = RATE_HZ):
        self.folder, self.binary, self.rate = folder, binary, rate
        self.running: list[tuple[Sampled, subprocess.Popen, Path]] = []
        self.sched: dict[int, Sched] = {}
        self.t0, self.last_rate = 0, rate
        self.done: list[Sampled] = []
        self.own_cpu_s = 0.0
        self.native: dict[int, str] = {}
        self.sampler: perf.SystemSampler | None = None
        self.skipped: list[Sampled] = []

    def describe(self) -> str:
        native = (f"native processes: perf, cpu-clock at {perf.RATE_HZ} Hz a CPU" if perf.refused() is None else
                  f"native processes not sampled: {perf.refused()}")
        return (f"{version(self.binary)}, on-CPU samples, nonblocking, at most {self.rate} Hz a process and "
                f"{SAMPLES_PER_S} samples/s a window; {native}")

    def rate_for(self, n: int) -> int:
        return max(MIN_RATE_HZ, min(self.rate, SAMPLES_PER_S // max(n, 1)))

    def start(self, procs: dict[int, str], name: str) -> None:
        """One py-spy per Python process and one system-wide perf for the native ones (harness.load.perf);
        `name` tells this window's files apart (`c4-stack`)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.sched, self.t0 = {pid: schedstat(pid) for pid in procs}, time.monotonic_ns()
        native = {pid: label for pid, label in procs.items() if not perf.is_python(pid)}
        self.native = native
        if native and (why := perf.refused()) is None:
            self.sampler = perf.SystemSampler(perf.perf_binary() or "perf", self.folder, name)
            self.sampler.start()
        else:
            self.sampler = None
            self.skipped = [Sampled(pid, label, None, why_not=f"a native process: {why}")
                            for pid, label in native.items()] if native else []
        python = {pid: label for pid, label in procs.items() if pid not in native}
        rate = self.last_rate = self.rate_for(len(python))
        for pid, label in sorted(python.items()):
            out = self.folder / f"{name}-{pid}.collapsed"
            log = self.folder / f"{name}-{pid}.log"
            with open(log, "wb") as err:
                p = subprocess.Popen([self.binary, "record", "--pid", str(pid), "--rate", str(rate),
                                      "--nonblocking", "--format", "raw", "--output", str(out)],
                                     stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
            self.running.append((Sampled(pid, label, out), p, log))

    def stop(self) -> list[Sampled]:
        """SIGINT to every py-spy, its file read back; its own CPU added to own_cpu_s."""
        span = time.monotonic_ns() - self.t0
        for s, _, _ in self.running:
            s.runnable = busiest(self.sched.get(s.pid, {}), schedstat(s.pid), span)
        for _, p, _ in self.running:
            try:
                self.own_cpu_s += sum(psutil.Process(p.pid).cpu_times()[:2])
            except psutil.Error:
                pass
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        out = []
        for s, p, log in self.running:
            try:
                p.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            if s.path is None or not s.path.exists() or s.path.stat().st_size == 0:
                said = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
                s.why_not = _why(said, p.returncode)
                s.path = None
            log.unlink(missing_ok=True)
            out.append(s)
        out += self._native(span)
        self.running = []
        self.done += out
        return out

    def _native(self, span: int) -> list[Sampled]:
        """The native processes' samples from the window's perf, or why they have none."""
        if self.sampler is None:
            out, self.skipped = self.skipped, []
            return out
        files, own = self.sampler.stop(self.native)
        self.own_cpu_s += own
        self.sampler = None
        return [Sampled(pid, label, f if isinstance(f, Path) else None, why_not=None if isinstance(f, Path) else f,
                        runnable=busiest(self.sched.get(pid, {}), schedstat(pid), span))
                for pid, label in self.native.items() for f in (files[pid],)]


def _why(log: list[str], rc: int | None) -> str:
    """py-spy's own reason, shortened: the line that names the failure."""
    for line in log:
        low = line.lower()
        if "failed to find python version" in low or "failed to get process executable name" in low:
            return "not a Python process (py-spy reads Python stacks only)"
        if "permission denied" in low or "operation not permitted" in low:
            return f"py-spy could not attach: {line.strip()}"
    for line in log:
        if line.startswith("Error:"):
            return f"py-spy: {line[len('Error:'):].strip()}"
    return f"py-spy wrote no samples (exit {rc}): the process was idle or exited during the window"
