"""Process plumbing shared by local adapters: free ports, a server started in its own process group with
its log in a file, readiness polling with a progress display, and a teardown that stops the whole group by
its id (never by name), waits, and verifies that no child survived and the port is free again."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from harness.errors import LayerbenchError
from harness.host.placement import deployment_preexec
from harness.redact import deployment_env

_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _child_preexec() -> None:
    # a stop signal held since the fork must stop this child, not raise KeyboardInterrupt in this function
    # (that would fail the parent's Popen): the server gets default handlers at exec anyway
    for s in _STOP_SIGNALS:
        if signal.getsignal(s) != signal.SIG_IGN:  # `nohup` stays in force
            signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    deployment_preexec()


# the ports bind(0) and connect() hand out: ip_local_port_range (the kernel's Documentation/networking/ip-sysctl.rst)
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port(*taken: int) -> int:
    """A port free on 127.0.0.1 now, below the kernel's ephemeral range and other than `taken` (the ports this
    deployment already chose). A port asked of the kernel with bind(0) is ephemeral: once its socket closes, any
    process's next bind(0) may get it before our server binds it. vLLM picks its engine's ports that way, and
    inside Triton the engine starts before Triton's HTTP service: in a make test run (2026-12-07) Triton then
    failed with "failed to start HTTP service: Unavailable - Socket '127.0.0.1:45711' already in use". Ports below
    the range (32768 here) are never handed out by bind(0). Where the range cannot be read, bind(0) it is."""
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(200 if low > 11_000 else 0):
        port = rng.randrange(10_000, low)
        if port not in taken and not port_in_use(port):
            return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            return port


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def ensure_port_free(port: int) -> None:
    if port_in_use(port):
        raise LayerbenchError(f"port {port} on 127.0.0.1 is already in use")


def log_tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return "(no log written)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class ManagedProcess:
    """A server process in its own session/process group, logging to a file."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None, keep_secrets: Iterable[str] = ()):
        """env: added to layerbench's own environment, less its secrets (tokens, cloud keys, kubeconfig):
        a server gets only those it names in `keep_secrets` or is given in `env`."""
        self.name, self.cmd, self.log_path = name, cmd, log_path
        self.env = {**deployment_env(os.environ, keep_secrets), **(env or {})}
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self._seen: dict[int, psutil.Process] = {}

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        # a Ctrl-C between fork and Popen's return would leave a server nobody knows the pid of: hold the
        # signals until self.proc is set (they are delivered right after); the server gets them unblocked
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                         cwd=self.cwd, start_new_session=True, stdin=subprocess.DEVNULL,
                                         preexec_fn=_child_preexec)
        except OSError as e:
            raise LayerbenchError(f"{self.name}: cannot start {self.cmd[0]}: {e}") from None
        finally:
            log.close()
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_reason(self) -> str | None:
        """Why this server is no longer running, or None while it runs (or was never started)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"{self.name} exited (code {self.proc.returncode}); see {self.log_path}"

    def tree(self) -> list[psutil.Process]:
        """The process and all its descendants now; remembered so teardown can verify each one ended."""
        if not self.alive():
            return []
        try:
            root = psutil.Process(self.proc.pid)  # type: ignore[union-attr]
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        for p in procs:
            self._seen.setdefault(p.pid, p)
        return procs

    def stop(self, timeout: float = 30.0, leader_grace: float = 0.0) -> list[str]:
        """SIGTERM the group, wait, SIGKILL what is left. Returns descriptions of survivors (should be []).
        leader_grace > 0: SIGTERM the leader alone first and give it that long to stop its own children
        (Ray's driver shuts its cluster down in order)."""
        if self.proc is None:
            return []
        self.tree()
        pgid = self.proc.pid
        if leader_grace and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=leader_grace)
            except subprocess.TimeoutExpired:
                pass
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
            # children that left the group (setsid) are still ours: signal them by pid
            for p in list(self._seen.values()):
                try:
                    if running(p):
                        p.send_signal(sig)
                except psutil.NoSuchProcess:
                    pass
            deadline = time.monotonic() + wait  # one deadline for the leader and the rest of its tree
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            _, alive = psutil.wait_procs(list(self._seen.values()), timeout=max(0.1, deadline - time.monotonic()))
            if not alive:
                break
        survivors = []
        for p in self._seen.values():
            try:
                if running(p):
                    survivors.append(f"pid {p.pid} ({p.name()})")
            except psutil.NoSuchProcess:
                pass
        return survivors


def running(p: psutil.Process) -> bool:
    """Still running: not gone, not a zombie waiting to be reaped."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Leftovers:
    """Files a deployment leaves behind that are not in its process tree (vLLM's /tmp/vllm_dist_*, the
    /dev/shm segments and semaphores of its multiprocessing: ~400 MB after a killed vLLM). Removed: entries
    matching the patterns that appeared between `snapshot()` and `remove()`, belong to this user, and that no
    running process holds (Holders.hold: another program's files that appeared meanwhile are in use by it, so
    they stay)."""

    def __init__(self, patterns: tuple[str, ...] = ("/tmp/vllm_dist_*", "/dev/shm/*")):
        self.patterns = patterns
        self._before: set[Path] | None = None

    def _now(self) -> set[Path]:
        return {p for pat in self.patterns for p in Path("/").glob(pat.lstrip("/"))}

    def snapshot(self) -> None:
        self._before = self._now()

    def remove(self) -> list[Path]:
        if self._before is None:
            return []
        # listed before the processes are read: a file made after the scan (another vLLM starting beside this one
        # creates a semaphore its child has yet to open) would be taken for an orphan; listed first, its maker
        # has it mapped or open by the time it is looked for
        appeared = self._now() - self._before
        held = holders()
        gone = []
        for p in sorted(appeared):
            try:
                if p.lstat().st_uid != os.getuid() or held.hold(p):
                    continue
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
                gone.append(p)
            except OSError:
                continue
        self._before = None
        return gone


@dataclass(frozen=True)
class Holders:
    """What running processes hold: paths (mapped, open, working directory, bound Unix sockets) and the inodes of
    their mappings and open files."""

    paths: frozenset[str]
    inodes: frozenset[tuple[int, int]]

    def hold(self, p: Path) -> bool:
        """A process holds `p`, or a path under it. By inode too: glibc's sem_open maps a temporary file and links
        it to the semaphore's name, so /proc/<pid>/maps names `/dev/shm/sem.XXXXXX (deleted)`, never the
        `sem.mp-*` name that /dev/shm lists (and it keeps no fd open)."""
        try:
            st = p.lstat()
        except OSError:
            return False
        return (st.st_dev, st.st_ino) in self.inodes or any(u == str(p) or u.startswith(f"{p}/") for u in self.paths)


def holders() -> Holders:
    """Every running process's mapped and open files, working directories and bound Unix sockets."""
    used: set[str] = set()
    inodes: set[tuple[int, int]] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for ln in (proc / "maps").read_text().splitlines():
                f = ln.split(maxsplit=5)
                if len(f) == 6 and f[4] != "0":  # address perms offset dev(major:minor, hex) inode path
                    major, _, minor = f[3].partition(":")
                    inodes.add((os.makedev(int(major, 16), int(minor, 16)), int(f[4])))
                    used.add(f[5])
            for fd in (proc / "fd").iterdir():
                try:  # an fd closed since the listing is gone, not a reason to skip the process's others
                    used.add(os.readlink(fd))
                    st = os.stat(fd)
                    inodes.add((st.st_dev, st.st_ino))
                except OSError:
                    continue
            used.add(os.readlink(proc / "cwd"))
        except (OSError, ValueError):
            continue
    try:  # Unix sockets bound to a path (ZMQ's ipc:// endpoints): the socket's holder is alive
        used.update(ln.split()[-1] for ln in Path("/proc/net/unix").read_text().splitlines()[1:]
                    if len(ln.split()) >= 8)
    except OSError:
        pass
    return Holders(frozenset(u.removesuffix(" (deleted)").strip() for u in used), frozenset(inodes))


def wait_http_ready(url: str, timeout: float, what: str, proc: ManagedProcess, console: Console | None = None,
                    headers: dict[str, str] | None = None) -> float:
    """Poll `url` until it answers 200; fail fast (with the last 40 lines of its log) if `proc` dies."""
    alive, log_path = proc.alive, proc.log_path
    t0 = time.monotonic()
    console = console or Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task(f"waiting for {what} ({url})", total=None)
        with httpx.Client(timeout=2.0, headers=headers) as client:
            poll_s = 0.05
            while True:
                if not alive():
                    raise LayerbenchError(
                        f"{what} exited during startup. Last 40 lines of {log_path}:\n{log_tail(log_path)}"
                    )
                try:
                    if client.get(url).status_code == 200:
                        return time.monotonic() - t0
                except httpx.HTTPError:
                    pass
                elapsed = time.monotonic() - t0
                if elapsed > timeout:
                    raise LayerbenchError(
                        f"{what} not ready after {timeout:.0f}s. Last 40 lines of {log_path}:\n{log_tail(log_path)}"
                    )
                progress.update(task, description=f"waiting for {what} ({url})")
                # the poll interval, not a readiness guess (readiness is the 200 above): 50 ms doubling to 0.5 s, so a
                # server up in 0.6 s (the reference engine) is seen then, not at the next half second
                time.sleep(poll_s)
                poll_s = min(0.5, poll_s * 2)


def stop_and_verify(proc: ManagedProcess, ports: list[int], what: str, timeout: float = 30.0,
                    leader_grace: float = 0.0) -> None:
    """Stop a server's process group and prove it is gone: no survivor, every port free again. A server
    that never started has nothing to stop (its port may be someone else's)."""
    if proc.proc is None:
        return
    if proc.alive():
        try:  # after SIGHUP the terminal may be gone: saying so must not break the teardown
            Console(stderr=True).print(f"stopping {what} (process group {proc.pid}; up to "
                                       f"{leader_grace + timeout + 10:.0f} s)", highlight=False)
        except (OSError, ValueError):
            pass
    survivors = proc.stop(timeout, leader_grace)
    deadline = time.monotonic() + 15
    while any(port_in_use(p) for p in ports) and time.monotonic() < deadline:
        time.sleep(0.2)
    busy = [p for p in ports if port_in_use(p)]
    if survivors or busy:
        raise LayerbenchError(f"{what} teardown incomplete: surviving processes {survivors}, ports still in use {busy}")
