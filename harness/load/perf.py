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

import functools
import os
import select
import shutil
import signal
import subprocess
import time
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
        self.ctl_fd: int | None = None  # perf's control FIFO, held open while it records
        self.failed: str | None = None  # why perf recorded nothing, where start() knew it

    def start(self) -> None:
        """Returns once perf records: it starts with its events off (`--delay=-1`) and turns them on when told on
        its control FIFO, answering `ack` when done (perf-record(1), --control=fifo:ctl-fifo[,ack-fifo]; perf 5.10
        and later). Reading /proc for every process before it samples took over 1.5 s on this host under load: a
        window that began at Popen lost its start. The control FIFO stays open until stop(): perf ends its
        session's sampling when the writer closes it (an enable followed at once by a close recorded nothing
        here). A perf without --control samples from Popen on; one that does not ack is stopped, and stop() says
        why for every process."""
        self.folder.mkdir(parents=True, exist_ok=True)
        control = _has_control(self.binary)
        ctl, ack = self.folder / f"{self.name}.perf.ctl", self.folder / f"{self.name}.perf.ack"
        cmd = [self.binary, "record", "-e", "cpu-clock", "-F", str(self.rate), "-g", "-a", "--quiet", "-o",
               str(self.data), *(["--delay=-1", f"--control=fifo:{ctl},{ack}"] if control else [])]
        try:
            if control:
                for fifo in (ctl, ack):
                    fifo.unlink(missing_ok=True)
                    os.mkfifo(fifo)
            with open(self.log, "wb") as err:
                self.proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
            if control:
                self.ctl_fd, acked = _enable(self.proc, ctl, ack)
                if not acked:
                    self.failed = f"perf did not start recording within {ENABLE_S:.0f} s (no ack on its control FIFO)"
                    if self.proc.poll() is None:
                        os.killpg(self.proc.pid, signal.SIGKILL)
                        self.proc.wait()
        finally:
            ctl.unlink(missing_ok=True)  # the open descriptors keep the FIFOs alive
            ack.unlink(missing_ok=True)

    def _close(self) -> None:
        if self.ctl_fd is not None:
            os.close(self.ctl_fd)
            self.ctl_fd = None

    def stop(self, pids: dict[int, str]) -> tuple[dict[int, Path | str], float]:
        """({pid: its collapsed stacks' file, or why there is none}, perf's own CPU seconds)."""
        p, own = self.proc, 0.0
        if p is None or self.failed:
            self._close()
            return {pid: self.failed or "perf did not start" for pid in pids}, own
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
        self._close()
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


ENABLE_S = 30.0  # the longest perf may take to start recording


@functools.lru_cache(maxsize=8)
def _has_control(binary: str) -> bool:
    """Whether this perf takes --control (asked once per binary: `perf record -h` lists its options)."""
    try:
        out = subprocess.run([binary, "record", "-h"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--control" in out.stdout + out.stderr


def _enable(proc: subprocess.Popen, ctl: Path, ack: Path) -> tuple[int | None, bool]:
    """Tells perf to start sampling and waits for its `ack`: (the control FIFO's write end, left open for the
    window, or None; whether perf acked) within ENABLE_S, or until perf exits."""
    deadline = time.monotonic() + ENABLE_S
    ack_fd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)  # opening the read end first never blocks
    ctl_fd = None
    try:
        while ctl_fd is None:  # the write end opens once perf has opened its read end
            try:
                ctl_fd = os.open(ctl, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader yet
                if proc.poll() is not None or time.monotonic() > deadline:
                    return None, False
                time.sleep(0.01)  # polling the FIFO for perf's reader; its opening is the readiness signal
        os.write(ctl_fd, b"enable\n")
        got = b""
        while b"ack" not in got and proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([ack_fd], [], [], 0.1)
            chunk = os.read(ack_fd, 64) if ready else b""
            if ready and not chunk:  # no writer yet: an empty FIFO reads as its end
                time.sleep(0.01)
            got += chunk
        return ctl_fd, b"ack" in got
    finally:
        os.close(ack_fd)


def collapse(script: str, pids: set[int]) -> dict[int, Counter[tuple[str, ...]]]:
    """`perf script -F pid,tid,ip,sym,dso` output -> per process, each stack (outermost first) and its samples.
    A sample is a `pid/tid` line and its frames, innermost first, each `<address> <symbol> (<object>)`."""
    out: dict[int, Counter[tuple[str, ...]]] = defaultdict(Counter)
    pid, frames = None, []
    for line in [*script.splitlines(), ""]:
        if not line.strip():
            if pid in pids and frames:
                out[pid][tuple(reversed(frames))] += 1
            pid, frames = None, []
        elif not line[0].isspace():
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
