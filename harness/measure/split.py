"""One side's level split across several load client processes (profile `client_procs`; the processes are
harness.load.workers'): how many a level gets, starting them, sending each its part, opening the window in all
at once, and merging what they measured into the level, every request once.

A merged level is judged as one: it is client-bound when any process was saturated, and its client figures are
the busiest process's, with every process's own kept in LevelSummary.workers."""

from __future__ import annotations

from harness.analysis.shards import worst_health
from harness.host.placement import client_cores
from harness.load import eventloop
from harness.load.barrier import Shard
from harness.load.levels import Driver
from harness.load.runner import LevelRun
from harness.load.workers import MAX_PROCS, Workers, WorkerSpec, auto_note, procs_for
from harness.results import RunWriter
from harness.schemas import ClientHealth


class Split:
    def __init__(self, spec: WorkerSpec, setting: int | str, driver: Driver, writer: RunWriter | None):
        self.spec, self.setting, self.driver = spec, setting, driver
        self.cores, host, pinned = client_cores()
        self.base = (driver.shard, driver.seed)
        self.pool: Workers | None = None
        self.n, self.level = 1, 0.0
        self.healths: list[ClientHealth] = []  # the level's, per process, when it was split
        self.last: tuple[float, float] | None = None  # (level, events/s) of this side's last measured level
        why = auto_note(self.cores, host, pinned) if setting == "auto" else f"client_procs {setting}, as set"
        if writer is not None:  # None: the harness benchmark's own levels
            writer.write_meta(client_procs={"setting": setting, "cores": self.cores, "why": why},
                              client_loop=eventloop.name())

    @property
    def open_loop(self) -> bool:
        return self.driver.profile.open_loop

    def begin(self, level: float, repeat: int) -> Split:
        """Decide the level's processes; with more than one, send the others their part and meet them."""
        self.level, self.healths = level, []
        expected = None if self.last is None else self.last[1] * level / self.last[0]
        self.n = procs_for(self.setting, level, self.open_loop, expected, self.cores)
        if self.n == 1:
            self.driver.shard, self.driver.seed = self.base
            return self
        pool = self._pool()
        self.driver.shard = Shard(0, self.n, pool.barrier(self.n))
        self.driver.seed = f"{self.base[1]}:w0" if self.open_loop else self.base[1]
        pool.send(self.n, {"op": "measure", "level": level, "repeat": repeat, "count": self.n})
        self.driver.shard.sync(f"level {repeat} {level}")
        self._window = f"window {repeat} {level}"
        return self

    def _pool(self) -> Workers:
        if self.pool is None or self.pool.count < self.n:
            if self.pool is not None:
                self.pool.close()
            most = MAX_PROCS if self.setting == "auto" else int(self.setting)
            self.pool = Workers(self.spec, max(self.n, min(most, self.cores)))
        return self.pool

    def open(self) -> None:
        if self.n > 1:
            assert self.driver.shard is not None
            self.driver.shard.sync(self._window)

    def end(self, run: LevelRun, on_record, opened: bool) -> LevelRun:
        """The level as one: every process's records (each once, written through on_record), sent counts and
        client health."""
        if self.n > 1:
            assert self.pool is not None
            if not opened:  # this process stopped before its window: the others wait at its barrier
                self.pool.send(self.n, {"op": "abort"})
            got = self.pool.results(self.n)
            for i in range(1, self.n):
                for d in self.pool.take_records(i):
                    on_record(d)
                    if d.get("phase") == "measure":
                        run.records.append(d)
            self.healths = [run.client, *(ClientHealth.model_validate(g["client"]) for g in got if g["client"])]
            run.client = worst_health(self.healths)
            run.sent += sum(g["sent"] for g in got)
            run.aborted = run.aborted or next((f"client process: {g['aborted']}" for g in got if g["aborted"]), None)
            run.window_s = max([run.window_s, *(g["window_s"] for g in got)])
        events = sum(len(r.get("event_ms") or ()) for r in run.records)
        if run.window_s > 0 and events:
            self.last = (self.level, events / run.window_s)
        return run

    def __enter__(self) -> Split:
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
