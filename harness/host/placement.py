"""Where the load client runs relative to the deployment: its scheduling priority and, on hosts with enough
cores, the cores it is pinned to. One Placement per layerbench process, chosen from the profile before
anything is deployed; every server process the stacks start goes through `deployment_preexec()`, so the
deployment runs at normal priority on the cores the client left it, whatever the client set for itself.

Why: on a 2-core host vLLM's CPU worker binds itself to core 0, and its engine core, API server, any layer,
the load client and the scraper all share core 1. A client starved of CPU stamps late; a higher priority
for the client (and the scraper it spawns) lets it run as soon as a byte arrives."""

from __future__ import annotations

import os

from pydantic import BaseModel


class Placement(BaseModel):
    """What was asked and what the OS allowed; recorded in run.json."""

    host_cores: int
    client_nice_requested: int
    client_nice: int  # what the client process now runs at
    deployment_nice: int
    client_cpus_requested: int
    client_cores: list[int] | None = None  # None: not pinned
    deployment_cores: list[int] | None = None
    notes: list[str] = []

    def sentence(self) -> str:
        pin = (f"client and scraper pinned to cores {self.client_cores}, deployment to {self.deployment_cores}"
               if self.client_cores else "client, scraper and deployment not pinned (shared cores)")
        return (f"{self.host_cores} cores; {pin}; client nice {self.client_nice} vs deployment "
                f"{self.deployment_nice}" + (f" ({'; '.join(self.notes)})" if self.notes else ""))


_current: Placement | None = None


def client_cores() -> tuple[int, int, bool]:
    """(cores the client may spread over, the host's cores, whether they were reserved for it): the client's
    pinned cores where placement reserved some, else 1 (it shares the host with the deployment)."""
    host = len(os.sched_getaffinity(0)) if _current is None else _current.host_cores
    if _current is not None and _current.client_cores:
        return len(_current.client_cores), host, True
    return 1, host, False


def apply(client_nice: int, client_cpus: int) -> Placement:
    """Set this process's priority and cores (inherited by the scraper it spawns later)."""
    global _current
    cores = sorted(os.sched_getaffinity(0))
    nice = os.getpriority(os.PRIO_PROCESS, 0)  # the deployment keeps the priority layerbench was started with
    p = Placement(host_cores=len(cores), client_nice_requested=client_nice, client_nice=nice,
                  deployment_nice=nice, client_cpus_requested=client_cpus)
    if client_nice != p.client_nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, client_nice)
            p.client_nice = client_nice
        except PermissionError:
            p.notes.append(f"raising the client's priority to nice {client_nice} is not permitted here")
    if client_cpus and len(cores) >= client_cpus + 2:
        p.client_cores, p.deployment_cores = cores[-client_cpus:], cores[:-client_cpus]
        os.sched_setaffinity(0, p.client_cores)
    elif client_cpus:
        p.notes.append(f"not pinned: pinning {client_cpus} core(s) for the client needs >= {client_cpus + 2}")
    _current = p
    return p


def set_client_nice(nice: int) -> int:
    """Change the client's priority in place (the observer benchmark alternates it); returns the value set."""
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    if _current is not None:
        _current.client_nice = nice
    return os.getpriority(os.PRIO_PROCESS, 0)


def deployment_preexec() -> None:
    """Runs in each server process between fork and exec: normal priority, the deployment's cores."""
    p = _current
    if p is None:
        return
    if os.getpriority(os.PRIO_PROCESS, 0) != p.deployment_nice:
        os.setpriority(os.PRIO_PROCESS, 0, p.deployment_nice)  # raising nice (lower priority) is always allowed
    if p.deployment_cores:
        os.sched_setaffinity(0, p.deployment_cores)


def fix_threads(pids: list[int]) -> str:
    """`server_placement: fixed`: every thread of the deployment's processes that is not bound to a single core
    (vLLM's CPU worker binds its compute threads, one per core) is pinned to the cores no such thread is bound
    to, so the API server, the engine core and a layer never preempt the worker on its core. Returns what it did;
    nothing is changed where every core is bound or nothing is."""
    import psutil

    threads: list[tuple[int, set[int]]] = []
    for pid in pids:
        try:
            threads += [(t.id, os.sched_getaffinity(t.id)) for t in psutil.Process(pid).threads()]
        except (psutil.Error, OSError):
            continue
    bound = {next(iter(cores)) for _, cores in threads if len(cores) == 1}
    free = sorted(set(os.sched_getaffinity(0)) | {c for _, cores in threads for c in cores}) if threads else []
    rest = [c for c in free if c not in bound]
    if not bound or not rest:
        return "fixed placement: nothing to fix (no thread is bound to one core, or every core is)"
    moved = 0
    for tid, cores in threads:
        if len(cores) > 1:
            try:
                os.sched_setaffinity(tid, rest)
                moved += 1
            except OSError:
                continue
    return f"fixed placement: {moved} threads pinned to cores {rest}, away from the core(s) {sorted(bound)} " \
           "the engine's compute threads are bound to"
