"""perf for a deployment's native processes (vllm-router, the SGLang gateway, Envoy, Triton's server: py-spy reads
Python stacks only): one system-wide `perf record -e cpu-clock -F <Hz> -g -a` for the window, stopped with SIGINT
(perf then writes its file: perf-record(1)), its samples split by process with `perf script -F pid,tid,ip,sym,dso`
and written as collapsed stacks, outermost frame first, like py-spy's: `main (router);handle (router) 3`.

System-wide, not `-p PID`: on this project's host (a Firecracker VM, Linux 6.1, perf 6.1) `perf record -p` on a
running process wrote no samples at all, while `-a` sampled every CPU (measured 2026-12-03). cpu-clock is a
software event, so it works where the VM exposes no hardware counters. Sampling every CPU needs
kernel.perf_event_paranoid <= 0 or CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8)
(Documentation/admin-guide/perf-security.rst)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import psutil

RATE_HZ = 99  # per CPU: off 100 so it does not beat against 100 Hz timers
STOP_S = 15.0
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38  # linux/capability.h
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


def perf_binary() -> str | None:
    return shutil.which("perf")


def _caps() -> int:
    try:
        return next(int(line.split()[1], 16) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return 0


def refused() -> str | None:
    """Why perf cannot sample this host's CPUs from here, or None where it can."""
    if perf_binary() is None:
        return "perf is not installed (Debian: `apt-get install linux-perf`)"
    caps = _caps()
    if caps >> CAP_PERFMON & 1 or caps >> CAP_SYS_ADMIN & 1:
        return None
    try:
        paranoid = int(PARANOID.read_text())
    except (OSError, ValueError):
        return "perf events are not available here (no /proc/sys/kernel/perf_event_paranoid)"
    if paranoid <= 0:
        return None
    return (f"kernel.perf_event_paranoid is {paranoid} and this user has neither CAP_PERFMON nor CAP_SYS_ADMIN: "
            "perf cannot sample the host's CPUs (`sudo sysctl kernel.perf_event_paranoid=0`; in a container, "
            "`--cap-add PERFMON`)")


def is_python(pid: int) -> bool:
    """The process runs a Python interpreter (py-spy's kind); a native server otherwise."""
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("python")
    except OSError:
        return True  # gone or unreadable: py-spy says why


class SystemSampler:
    """One `perf record -a` over a window; stop() splits its samples by process into collapsed-stack files."""

    def __init__(self, binary: str, folder: Path, name: str, rate: int = RATE_HZ):
        self.binary, self.folder, self.name, self.rate = binary, folder, name, rate
        self.data = folder / f"{name}.perf.data"
        self.proc: subprocess.Popen | None = None
        self.log = folder / f"{name}.perf.log"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen([self.binary, "record", "-e", "cpu-clock", "-F", str(self.rate), "-g", "-a",
                                          "--quiet", "-o", str(self.data)], stdout=err, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self, pids: dict[int, str]) -> tuple[dict[int, Path | str], float]:
        """({pid: its collapsed stacks' file, or why there is none}, perf's own CPU seconds)."""
        p, own = self.proc, 0.0
        if p is None:
            return {pid: "perf did not start" for pid in pids}, own
        try:
            own = sum(psutil.Process(p.pid).cpu_times()[:2])
        except psutil.Error:
            pass
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        try:
            p.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        said = self.log.read_text(errors="replace").strip() if self.log.exists() else ""
        self.log.unlink(missing_ok=True)
        if not self.data.exists():
            return {pid: f"perf wrote no data (exit {p.returncode}): {said.splitlines()[-1] if said else ''}"
                    for pid in pids}, own
        script = subprocess.run([self.binary, "script", "-i", str(self.data), "-F", "pid,tid,ip,sym,dso"],
                                capture_output=True, text=True, timeout=120)
        self.data.unlink(missing_ok=True)
        stacks = collapse(script.stdout, set(pids))
        out: dict[int, Path | str] = {}
        for pid in pids:
            if not stacks.get(pid):
                out[pid] = "perf sampled none of its threads on a CPU in the window"
                continue
            path = self.folder / f"{self.name}-{pid}.collapsed"
            path.write_text("".join(f"{';'.join(frames)} {n}\n" for frames, n in stacks[pid].items()))
            out[pid] = path
        return out, own


def collapse(script: str, pids: set[int]) -> dict[int, Counter[tuple[str, ...]]]:
    """`perf script -F pid,tid,ip,sym,dso` output -> per process, each stack (outermost first) and its samples.
    A sample is a `pid/tid` line and its frames, innermost first, each a tab then `<address> <symbol> (<object>)`.
    perf right-aligns the pid (`"%5d/%-5d "`, perf_sample__fprintf_start in linux tools/perf/builtin-script.c; a
    later patch widens it to 7), so a pid under 10000 starts its line with spaces, as on a freshly booted host: a
    frame is told by its leading tab, never by leading white space."""
    out: dict[int, Counter[tuple[str, ...]]] = defaultdict(Counter)
    pid, frames = None, []
    for line in [*script.splitlines(), ""]:
        if not line.strip():
            if pid in pids and frames:
                out[pid][tuple(reversed(frames))] += 1
            pid, frames = None, []
        elif not line.startswith("\t"):
            head = line.split()[0].split("/")[0]
            pid = int(head) if head.isdigit() else None
        elif pid in pids:
            parts = line.strip().split(" ", 1)
            frames.append(_frame(parts[1] if len(parts) > 1 else parts[0]))
    return out


def _frame(text: str) -> str:
    """`handle_request+0x1f (/usr/bin/vllm-router)` -> `handle_request (vllm-router)`."""
    sym, _, obj = text.rpartition(" (")
    sym = sym.split("+0x")[0] or "[unknown]"
    return f"{sym} ({Path(obj.rstrip(')')).name or '?'})"
