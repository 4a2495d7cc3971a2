"""One level driver for both loops: a level is a concurrency (closed loop, harness.load.runner) or an offered rate
(open loop, harness.load.openloop); what a sweep does around it, the warmup wave, the measured window and its
callbacks, is the same either way, so it is written once here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from harness.load.barrier import Shard
from harness.load.client import RequestRecord, StreamClient
from harness.load.openloop import RatePlan, run_rate_level, warm_open, warmup_requests
from harness.load.prompts import PromptGenerator
from harness.load.runner import Hooks, LevelPlan, LevelRun, Sender, run_level, warm
from harness.profile.schema import LoadProfile

Callback = Callable[[RequestRecord], None]


@dataclass
class Driver:
    """How this load process sends a profile's levels: its client and prompts, the arrivals' seed (both sides of
    a compare replay the same schedule), and its part of each level when it is one of several load processes."""

    client: StreamClient
    gen: PromptGenerator
    profile: LoadProfile
    seed: str | int
    shard: Shard | None = None
    dead: Callable[[], str | None] | None = None  # the deployment's cheap liveness check, watched while sending

    @property
    def open_loop(self) -> bool:
        return self.profile.open_loop

    @property
    def sender(self) -> Sender:
        return Sender(self.client, self.gen, self.dead)

    def part(self, n: int) -> int:
        return self.shard.part(n) if self.shard else n

    def rate(self, level: float) -> float:
        """This process's share of an open-loop level's rate (each of N load pods sends rate/N)."""
        return level / (self.shard.count if self.shard else 1)

    def requests(self, level: float) -> int:
        return self._whole(self.profile.requests_for(level))

    def _whole(self, n: int) -> int:
        """This process's part of n requests: of n / turns chats where chats start on a schedule, so that the
        processes together send the level's whole chats."""
        p = self.profile
        turns = p.sessions.turns if p.chats_open and p.sessions else 1
        return self.part(-(-n // turns)) * turns

    async def warm(self, level: float, on_record: Callback) -> str | None:
        """One unmeasured wave at the level (the warmup sweep); why it stopped, or None."""
        waves = max(1, self.profile.warmup_waves)
        if self.open_loop:
            n = self._whole(warmup_requests(level, waves, self.profile.requests_for(level)))
            return await warm_open(self.sender, self._plan(level, n, 0, waves), on_record)
        return await warm(self.sender, self.part(int(level)), waves, on_record)

    async def measure(self, level: float, repeat: int, on_record: Callback, on_progress: Callback,
                      process_cpu: Callable, on_measure_start: Callable[[], None]) -> LevelRun:
        """The level's own warmup waves, then its measured window."""
        p = self.profile
        hooks = Hooks(on_record, on_progress, process_cpu, on_measure_start)
        n = self.requests(level)
        if self.open_loop:
            plan = self._plan(level, n, repeat, p.warmup_waves)
            if p.trace is not None:  # the trace's own arrivals; of N load processes, each sends every Nth request
                k, count = (self.shard.index, self.shard.count) if self.shard else (0, 1)  # (or chat, with sessions)
                trace, chats, segment = p.replay(), p.trace.sessions, p.segment(level)  # one segment: the whole
                inside = set(segment)
                every, mine = trace.offsets_ns(), tuple(i for i in trace.share(k, count, chats) if i in inside)
                t0 = every[segment[0]]  # a segment's arrivals from its own first
                plan = replace(plan, offsets=tuple(every[i] - t0 for i in mine), indices=mine,
                               after=trace.previous_turns(mine) if chats else None)
            return await run_rate_level(self.sender, plan, hooks)
        return await run_level(self.sender, LevelPlan(self.part(int(level)), n, repeat=repeat,
                                                      warmup_waves=p.warmup_waves, min_duration_s=p.min_duration_s),
                               hooks)

    def _plan(self, level: float, n: int, repeat: int, warmup_waves: int) -> RatePlan:
        """This process's part of an open-loop level: n requests at its share of the rate (chats of the profile's
        turns where `sessions.rate` starts them)."""
        p, chats = self.profile, self.profile.sessions if self.profile.chats_open else None
        return RatePlan(self.rate(level), n, repeat=repeat, warmup_waves=warmup_waves, arrival=p.arrival,
                        seed=self.seed, turns=chats.turns if chats else 1, think_s=chats.think_time_s if chats else 0.0)
