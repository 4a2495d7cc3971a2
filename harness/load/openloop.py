"""Open-loop load: requests sent at fixed rates, whatever the server does.

Request i of a level is due at t0 + the sum of the first i inter-arrival gaps (exponential of mean 1/rate for
`poisson`, exactly 1/rate for `constant`); its `t_due_ns` is that scheduled time. A request never waits for an
earlier one: a slow server builds a queue, it does not slow the sender. Latency counts from the scheduled time
(harness/analysis/stats.py), so the queue shows in TTFT and E2E instead of being hidden by a client that slowed down
(coordinated omission). The client's own lateness, scheduled time -> the request's task began (before any
connect), is kept apart as the record's dispatch delay, and a level whose client could not keep to its schedule
is flagged (stats.schedule_check), never silently under-driven.

Connections are a pool of keep-alive connections: a request takes a free one or opens a new one, and connect
time is part of its latency from schedule, not of the client's lateness. The warmup, the dead-deployment
watch, Ctrl-C recording, the hooks and the client's health are the closed loop's (harness/load/runner.py)."""

from __future__ import annotations

import asyncio
import hashlib
import math
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.load.client import Connection, RequestRecord, StreamClient
from harness.load.pacer import pace
from harness.load.runner import (
    NO_HOOKS,
    Chat,
    Flow,
    Hooks,
    LevelRun,
    Phase,
    Sender,
    ignore_record,
    judge_client,
    measured_window,
    send,
    stopped,
    watch,
)
from harness.schemas import Dist

# A chat's next turn sleeps until this close to its due time, then yields to the loop until it is due: uvloop's
# timers are libuv's, whole milliseconds from the loop's cached "now" (MagicStack/uvloop uvloop/handles/timer.pyx;
# libuv docs/src/timer.rst), so a sleep rounded down may end before its time (harness/load/pacer.py paces the
# schedule itself in a thread for the same reason)
EARLY_NS = 2_000_000
# One warmup wave of an open-loop level is one second of its schedule (at most the level's request count): it
# opens about as many connections as the level keeps in flight while requests take up to a second.
WAVE_S = 1.0


def schedule(rate: float, n: int, arrival: str = "poisson", seed: int | str = 0, repeat: int = 0,
             phase: str = "measure") -> list[int]:
    """Send offsets (ns after t0) of n requests at `rate` req/s; the first is due at t0. Poisson gaps are drawn
    from a generator seeded by (seed, rate, repeat, phase): a run, its resume and both sides of a compare replay
    the same arrivals."""
    if n <= 0:
        return []
    if arrival == "constant":
        return [round(i * 1e9 / rate) for i in range(n)]
    if arrival != "poisson":
        raise ValueError(f"unknown arrival {arrival!r}: poisson or constant")
    key = hashlib.blake2b(f"{seed}|{float(rate)!r}|{repeat}|{phase}".encode(), digest_size=8).digest()
    gaps = np.random.default_rng(int.from_bytes(key, "big")).exponential(1e9 / rate, n - 1)
    return [0, *(int(x) for x in np.round(np.cumsum(gaps)))]


def warmup_requests(rate: float, waves: int, n: int) -> int:
    return min(n, waves * max(1, math.ceil(rate * WAVE_S)))


def max_connections() -> int:
    """At most half the open-file limit: past it a request waits for a free connection, which counts in its
    latency from schedule (the wait is a queue, as on the server) and never in the client's lateness."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(16, min(10_000, (soft if soft != resource.RLIM_INFINITY else 20_000) // 2))


class Pool:
    """Keep-alive connections: a request takes a free one (the most recently used) or opens a new one."""

    def __init__(self, client: StreamClient, limit: int | None = None):
        self.client, self.limit = client, limit or max_connections()
        self.all: list[Connection] = []
        self.free: list[Connection] = []
        self._freed = asyncio.Event()

    async def get(self) -> Connection:
        while not self.free and len(self.all) >= self.limit:
            self._freed.clear()
            await self._freed.wait()
        if self.free:
            return self.free.pop()
        conn = self.client.connection()
        self.all.append(conn)
        return conn

    def put(self, conn: Connection) -> None:
        self.free.append(conn)  # a closed one reopens on its next use (Connection.ensure)
        self._freed.set()

    def close(self) -> None:
        for c in self.all:
            c.close()


@dataclass(frozen=True)
class RatePlan:
    """One open-loop level: `warmup_waves` unmeasured seconds of its schedule, then `requests` measured ones at
    `rate` req/s, their arrivals `arrival` (poisson, constant) drawn from `seed`."""

    rate: float
    requests: int
    repeat: int = 0
    warmup_waves: int = 1
    arrival: str = "poisson"
    seed: int | str = 0
    offsets: tuple[int, ...] | None = None  # a trace's arrivals (ns after the first) instead of a drawn schedule
    indices: tuple[int, ...] | None = None  # which of the trace's requests this process sends (offsets' order)
    after: tuple[int, ...] | None = None  # a trace's chats: each request waits for the one at this offset (-1: none)
    turns: int = 1  # > 1: the schedule starts chats of this many turns (rate / turns a second), not requests
    think_s: float = 0.0  # a chat's next turn is due this long after its last answer ended

    def starts(self, n: int, phase: str) -> list[int]:
        """The schedule of n requests: their sends, or the starts of the chats that send them."""
        chats = math.ceil(n / self.turns)
        return schedule(self.rate / self.turns, chats, self.arrival, self.seed, self.repeat, phase)

    def sends(self, measured: bool) -> Sends:
        """How a phase of it sends its schedule: chats of its turns; the measured one, a trace's numbering and
        chats (a warmup's prompts are its own)."""
        return Sends(self.indices if measured else None, self.turns, self.think_s,
                     self.after if measured else None)


@dataclass(frozen=True)
class Sends:
    """How drive_open sends its schedule: offsets[i] is request indices[i] where given (a trace's own numbering),
    else request i; with turns > 1 it starts chat i instead, each next turn due think_s after the last answer
    ended; with `after` (a trace's chats) request i waits until request after[i] has ended (-1: none)."""

    indices: tuple[int, ...] | None = None
    turns: int = 1
    think_s: float = 0.0
    after: tuple[int, ...] | None = None


ONE_EACH = Sends()


async def drive_open(sender: Sender, phase: Phase, offsets: list[int], pool: Pool,
                     on_record: Callable[[RequestRecord], None], how: Sends = ONE_EACH) -> Flow:
    """Sends request i at t0 + offsets[i] (phase.level: the rate), as `how` says (Sends). A chat's turn is due its
    think time after the previous answer ended, counted from then (the wait for an answer is the user's, not the
    client's lateness), and a failed turn ends the chat. A trace's turn held for its chat's previous answer is due
    at the later of its own time and that answer's end, and its record says how long it was held. As in
    runner.drive, every request taken is recorded exactly once (sent = recorded), also when the phase is stopped by
    a dead deployment, Ctrl-C or a failed write."""
    clock = time.perf_counter_ns
    client, gen, dead = sender.client, sender.gen, sender.dead  # locals: each request reads them
    rate, repeat, name, keep = phase.level, phase.repeat, phase.name, phase.keep
    indices, turns, after = how.indices, how.turns, how.after
    flow = Flow(len(offsets) * turns, 0.0)
    think_ns = round(how.think_s * 1e9)
    tasks: list[asyncio.Task] = []  # the scheduler, then every request; runner.watch cancels them all
    failure: list[BaseException] = []
    finished = asyncio.Event()
    live = [0]

    def record(rec: RequestRecord) -> None:
        flow.recorded += 1
        if keep:
            flow.records.append(rec)
        on_record(rec)

    def done(t: asyncio.Task) -> None:
        live[0] -= 1
        if not t.cancelled() and t.exception() is not None and not failure:
            failure.append(t.exception())  # type: ignore[arg-type]
        if failure or live[0] == 0:
            finished.set()

    def spawn(coro) -> None:
        t = asyncio.create_task(coro)
        live[0] += 1
        t.add_done_callback(done)
        tasks.append(t)

    async def request(i: int, due: int, began: int, chat: Chat | None, held_ns: int = 0) -> RequestRecord | None:
        taken = flow.take()
        if taken is None:  # taken once started: a task cancelled before it ran sent nothing
            return None
        if indices is not None:
            i = indices[i]
        elif chat is not None:
            i = taken  # a chat's requests are numbered as sent; its prompts are its turns'
        rec = RequestRecord(level=rate, index=i, repeat=repeat, phase=name, t_due_ns=due,  # type: ignore[arg-type]
                            t_task_ns=began, held_ms=held_ns / 1e6)
        conn = None
        try:
            conn = await pool.get()
            await send(client, conn, gen, rec, i + repeat * 1_000_000, chat.next(rec) if chat else None)
        except BaseException as e:  # taken means recorded, whatever stopped it
            stopped(rec, e, flow)
            if conn is not None:
                conn.close()
            record(rec)
            raise
        finally:
            if conn is not None:
                pool.put(conn)
        record(rec)
        flow.reached(rec)
        return rec

    ended = {j: asyncio.Event() for j in set(after or ()) if j >= 0}  # a chat's turn, waited for by the next
    end_ns: dict[int, int] = {}

    async def one(i: int, due: int) -> None:
        if after is not None:
            await held(i, due)
            return
        if turns == 1:
            await request(i, due, clock(), None)
            return
        chat = Chat(gen, i, 1, repeat, think_s=0.0)  # the think time is waited for here, to its due time
        while (rec := await request(i, due, clock(), chat)) is not None:
            await chat.after(rec)
            if chat.turn == 0:  # the last turn, or a failed one: the chat is over
                return
            due = rec.t_end_ns + think_ns
            while (wait := due - clock()) > 0:  # never before its due time: the loop's timers may wake ~1 ms early
                await asyncio.sleep((wait - EARLY_NS) / 1e9 if wait > EARLY_NS else 0)

    async def held(i: int, due: int) -> None:
        """A trace's turn: sent when its chat's previous turn has ended, if that is after its own time."""
        scheduled, rec = due, None
        try:
            if (j := after[i]) >= 0:  # type: ignore[index]
                await ended[j].wait()
                due = max(due, end_ns[j])
            rec = await request(i, due, clock(), None, held_ns=due - scheduled)
        finally:
            if i in ended:  # its next turn waits for this end (a failed or stopped one's: now)
                end_ns[i] = rec.t_end_ns if rec is not None and rec.t_end_ns else clock()
                ended[i].set()

    def fire(i: int, due: int) -> None:
        # a send the pacer's thread queued before the phase was stopped arrives after its requests were cancelled:
        # started then, it would be sent after Ctrl-C, waited for by nobody, and leave a gap in what was recorded
        if flow.abort is None and not flow.closed:
            spawn(one(i, due))  # overdue requests go out at once, in a burst: the schedule is never stretched

    async def scheduler() -> None:  # harness.load.pacer: each send on its absolute deadline, to the microsecond
        await pace(offsets, clock(), fire, lambda: flow.abort is not None or flow.closed)

    spawn(scheduler())
    await _until_done(flow, tasks, finished, failure, dead)
    return flow


async def _until_done(flow: Flow, tasks: list[asyncio.Task], finished: asyncio.Event, failure: list[BaseException],
                      dead: Callable[[], str | None] | None) -> None:
    """Waits for every request of the phase, watching the deployment; on Ctrl-C or a failed request's error the
    rest are cancelled (each records what it had in flight) and the error goes on."""
    watcher = asyncio.create_task(watch(flow, tasks, dead))
    try:
        await finished.wait()
    except asyncio.CancelledError:  # Ctrl-C / SIGTERM: the requests record what they had in flight
        flow.closed = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        watcher.cancel()
    if failure:  # e.g. results could not be written: stop the rest, then say why
        flow.abort = flow.abort or f"stopped: {failure[0]}"
        flow.closed = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise failure[0]
    await asyncio.gather(*tasks, return_exceptions=True)


async def warm_open(sender: Sender, plan: RatePlan,
                    on_record: Callable[[RequestRecord], None] = ignore_record) -> str | None:
    """plan.requests unmeasured requests at its rate (the warmup sweep before the first measured level, n:
    warmup_requests); returns why it stopped early, if it did."""
    pool = Pool(sender.client)
    try:
        flow = await drive_open(sender, Phase(plan.rate, 0, "warmup-sweep", keep=False),
                                plan.starts(plan.requests, "warmup-sweep"), pool, on_record, plan.sends(False))
        return flow.abort
    finally:
        pool.close()


async def run_rate_level(sender: Sender, plan: RatePlan, hooks: Hooks = NO_HOOKS) -> LevelRun:
    """One open-loop level: `warmup_waves` unmeasured seconds of its schedule, then its measured requests."""
    rate, repeat = plan.rate, plan.repeat
    pool = Pool(sender.client)
    try:
        if plan.warmup_waves:
            n_warm = warmup_requests(rate, plan.warmup_waves, plan.requests)
            warmup = await drive_open(sender, Phase(rate, repeat, "warmup", keep=False), plan.starts(n_warm, "warmup"),
                                      pool, hooks.on_record, plan.sends(False))
            if warmup.abort:
                return LevelRun(concurrency=0, rate=rate, repeat=repeat, records=[], sent=0, aborted=warmup.abort,
                                client=judge_client(0.0, Dist(), Dist()), process_cpu_s={}, window_s=0.0)
        offsets = list(plan.offsets) if plan.offsets is not None else plan.starts(plan.requests, "measure")
        w = await measured_window(lambda measured: drive_open(sender, Phase(rate, repeat, "measure"), offsets, pool,
                                                              measured, plan.sends(True)), hooks)
    finally:
        pool.close()
    records = w.flow.records
    # the client's lateness is judged against the schedule (stats.schedule_check, its own bound), not by the
    # closed loop's 1 ms dispatch rule: asyncio timers alone wake up to 1 ms late; CPU and loop lag are judged alike
    health = judge_client(w.cpu_pct, w.lag, Dist())
    health.dispatch_delay_ms = Dist.of([r.dispatch_delay_ms for r in records])
    return LevelRun(concurrency=0, rate=rate, repeat=repeat, records=[r.to_json() for r in records],
                    sent=w.flow.sent, aborted=w.flow.abort, client=health, process_cpu_s=w.process_cpu_s,
                    window_s=w.window_s)
