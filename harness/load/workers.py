"""Several load client processes for one side (profile `client_procs`): a level's slots, or its arrival rate,
split across N processes that open its window together, so that a client which would run out of one core does
not cap the engine it measures.

The sweep's own process is worker 0: it keeps the callbacks, the progress, the window's edges and what is
written. Workers 1..N-1 are spawned processes, each with a pipe to it. For every level worker 0 sends them the
level; at the level's start and again at its window's opening each says `ready` and waits for `go`, which worker
0 sends once all (and it) are there: a barrier over the pipes. Each worker writes its records to its own file as
they are measured (requests-w<i>.jsonl), then reports its sent count and its client health; worker 0 merges
the files into the run's requests.jsonl, every request once, on the one monotonic clock every process of the host
shares (Linux's CLOCK_MONOTONIC, which time.perf_counter_ns reads). The scraper and the core sampler stay in their
own processes, never in a worker's.

`auto` sizes N per level from the events per second the side's previous level streamed (scaled to this level's
slots) and the client's CPU per event (`make bench-harness`), within the cores the host leaves the client
(`client_cpus`, where placement reserved them)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

from harness.childproc import StopFlag, child_signals, start_child, stop_child
from harness.errors import LayerbenchError
from harness.load import eventloop
from harness.profile.schema import CLIENT_PROCS_MAX as MAX_PROCS

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from harness.load.client import StreamClient
    from harness.load.prompts import PromptGenerator
    from harness.profile.schema import LoadProfile

US_PER_EVENT = 26.0  # the client's CPU per SSE event at c=64 (`make bench-harness`, scale section, 2-core host)
CORE_SHARE = 0.5  # a worker is sized to use at most half a core: bursts fit, its loop lag stays low
REPLY_S = 1800.0  # the longest a worker may take to answer: a whole level at request_timeout_s and more


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to send the side's load (picklable: it crosses into a spawned process)."""

    base_url: str
    model: str
    protocol: str
    profile: dict  # LoadProfile.model_dump()
    seed: str
    run_id: str
    prompts_key: str  # the side's PromptGenerator key; a worker's prompts are its own (":w<i>")
    tokenizer: str | None
    out_dir: str
    keep_headers: tuple[str, ...] = ()  # the stack's timing headers each record keeps (Stack.layer_headers)
    spread: tuple[str, ...] = ()  # several engines' base URLs the client spreads over (Endpoint.spread)
    spread_by: str = "round_robin"


@dataclass(frozen=True)
class WorkerLoad:
    """What worker `index` sends with, in its own process: the side's profile, its own client and prompts, the
    side's seed, its pipe to worker 0 and the file descriptor its records are appended to."""

    index: int
    profile: LoadProfile
    client: StreamClient
    gen: PromptGenerator
    seed: str
    conn: Connection
    fd: int


def records_path(out_dir: Path | str, index: int) -> Path:
    return Path(out_dir) / f"requests-w{index}.jsonl"


def procs_for(setting: int | str, level: float, open_loop: bool, events_per_s: float | None, cores: int,
              us_per_event: float = US_PER_EVENT) -> int:
    """Processes for one level. A number is taken as given (at most the level's slots in a closed loop); `auto`
    is the fewest that keep each under CORE_SHARE of a core at the expected events per second, within `cores`."""
    if setting != "auto":
        n = int(setting)
    elif events_per_s is None:
        n = 1
    else:
        n = min(max(1, cores), math.ceil(events_per_s * us_per_event / 1e6 / CORE_SHARE))
    n = max(1, min(n, MAX_PROCS))
    return n if open_loop else min(n, max(1, int(level)))


def auto_note(cores: int, host_cores: int, pinned: bool) -> str:
    """Why `auto` can use this many processes here, for run.json."""
    if cores <= 1:
        return (f"client_procs auto: 1 process. This host has {host_cores} core(s) and "
                + ("reserves one for the client (client_cpus: 1)" if pinned else
                   "shares them between the client and the deployment (no core reserved: that needs client_cpus "
                   "+ 2 cores)")
                + "; a second client process would take the deployment's CPU instead of adding the client's")
    return (f"client_procs auto: up to {cores} processes, one per core reserved for the client (client_cpus), each "
            f"sized to use at most {CORE_SHARE:.0%} of a core at {US_PER_EVENT:.0f} µs per event")


class Workers:
    """Workers 1..n-1 of a side, started once and given each level's part; worker 0 is the caller."""

    def __init__(self, spec: WorkerSpec, count: int):
        self.spec, self.count = spec, count
        ctx = get_context("spawn")  # no fork of a process with threads and an event loop
        self.procs, self.conns, self.flags = [], [], []
        for i in range(1, count):
            ours, theirs = ctx.Pipe()
            flag = StopFlag(ctx)
            p = ctx.Process(target=worker_main, name=f"layerbench-client-w{i}", daemon=True,
                            args=(spec, i, theirs, flag))
            start_child(p)
            self.procs.append(p)
            self.conns.append(ours)
            self.flags.append(flag)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def send(self, n: int, command: dict) -> None:
        for conn in self.conns[:n - 1]:
            conn.send(command)

    def recv(self, i: int) -> object:
        conn, proc = self.conns[i], self.procs[i]
        if not conn.poll(REPLY_S) or not proc.is_alive() and not conn.poll(0):
            raise LayerbenchError(f"load client worker {i + 1} did not answer (exit code {proc.exitcode})")
        try:
            return conn.recv()
        except EOFError:
            raise LayerbenchError(f"load client worker {i + 1} is gone (exit code {proc.exitcode})") from None

    def barrier(self, n: int) -> ParentBarrier:
        return ParentBarrier(self, n)

    def results(self, n: int) -> list[dict]:
        """Each worker's report of the level just sent; raises if one failed."""
        out = []
        for i in range(n - 1):
            got = self.recv(i)
            while isinstance(got, tuple) and got[:1] == ("ready",):  # at a barrier worker 0 never reached
                got = self.recv(i)
            if not isinstance(got, dict) or "sent" not in got:
                raise LayerbenchError(f"load client worker {i + 1} answered {got!r} instead of its level's results")
            out.append(got)
        return out

    def take_records(self, index: int) -> list[dict]:
        """Worker `index`'s records of the level it just reported, removed from its file."""
        path = records_path(self.spec.out_dir, index)
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return []
        path.write_text("")
        return [json.loads(x) for x in lines if x.strip()]

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send({"op": "stop"})
            except (BrokenPipeError, OSError):
                pass
        for p, flag in zip(self.procs, self.flags, strict=True):
            stop_child(p, flag, timeout=10.0)
        for i in range(1, self.count):
            records_path(self.spec.out_dir, i).unlink(missing_ok=True)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ParentBarrier:
    """Worker 0's side of the barrier: every worker's `ready <phase>`, then `go` to all."""

    def __init__(self, workers: Workers, n: int):
        self.workers, self.n = workers, n

    def wait(self, phase: str) -> None:
        for i in range(self.n - 1):
            got = self.workers.recv(i)
            if got != ("ready", phase):
                self.workers.send(self.n, {"op": "abort"})
                raise LayerbenchError(f"load client worker {i + 1} said {got!r} at {phase!r}: it stopped early or "
                                      "is out of step")
        self.workers.send(self.n, {"op": "go"})


class ChildBarrier:
    def __init__(self, conn):
        self.conn = conn

    def wait(self, phase: str) -> None:
        self.conn.send(("ready", phase))
        answer = self.conn.recv()
        if answer != {"op": "go"}:
            raise LayerbenchError(f"worker 0 stopped the level at {phase!r}")


def worker_main(spec: WorkerSpec, index: int, conn, flag: StopFlag) -> None:
    """A worker's loop: one level at a time, as worker 0 sends them, until `stop` or its parent is gone."""
    child_signals(flag)
    from harness.load.prompts import PromptGenerator
    from harness.load.protocols import CLIENTS
    from harness.load.spread import client_for
    from harness.profile.schema import LoadProfile

    profile = LoadProfile.model_validate(spec.profile)
    gen = PromptGenerator.for_profile(spec.run_id, f"{spec.prompts_key}:w{index}", profile,
                                      Path(spec.tokenizer) if spec.tokenizer else None)
    client = client_for(CLIENTS, (spec.base_url, spec.model, spec.protocol), (list(spec.spread), spec.spread_by),
                        index, api=profile.api, ignore_eos=profile.ignore_eos, timeout_s=profile.request_timeout_s)
    client.keep_text = profile.sessions is not None
    client.keep_headers = spec.keep_headers
    fd = os.open(records_path(spec.out_dir, index), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    me = WorkerLoad(index, profile, client, gen, spec.seed, conn, fd)
    try:
        while not flag.is_set():
            if not conn.poll(0.05):
                continue
            cmd = conn.recv()
            if cmd.get("op") == "stop":
                return
            if cmd.get("op") != "measure":
                continue  # an abort or go for a level that already ended here
            conn.send(_one_level(cmd, me))
    except (EOFError, BrokenPipeError):
        return  # worker 0 is gone
    finally:
        os.close(fd)


def _one_level(cmd: dict, worker: WorkerLoad) -> dict:
    from harness.load.barrier import Shard
    from harness.load.levels import Driver

    index, profile, seed, conn, fd = worker.index, worker.profile, worker.seed, worker.conn, worker.fd
    client, gen = worker.client, worker.gen
    c, rep, n = cmd["level"], cmd["repeat"], cmd["count"]
    shard = Shard(index, n, ChildBarrier(conn))
    driver = Driver(client, gen, profile, f"{seed}:w{index}" if profile.open_loop else seed, shard)

    def write(rec) -> None:
        d = rec.to_json()
        d["worker"] = index
        os.write(fd, (json.dumps(d, separators=(",", ":")) + "\n").encode())

    try:
        shard.sync(f"level {rep} {c}")
        run = eventloop.run(driver.measure(c, rep, write, lambda r: None, None,
                                           lambda: shard.sync(f"window {rep} {c}")))
    except LayerbenchError as e:
        return {"sent": 0, "aborted": str(e), "client": None, "window_s": 0.0}
    return {"sent": run.sent, "aborted": run.aborted, "client": run.client.model_dump(), "window_s": run.window_s}
