"""Closed-loop load: exactly `c` requests in flight per level, after a warmup wave of distinct prompts.

Each of the c slots owns a keep-alive connection and sends its next request as soon as the previous one
ends; the time between those two moments is the dispatch delay, a direct measure of the client being slow.
The runner also samples the client's CPU and event-loop lag, and the CPU time of every process of the
deployment, so a report can say where the CPU went and whether the load generator was saturated or starved."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import psutil
from pydantic import BaseModel

from harness.load.client import RequestRecord, StreamClient
from harness.load.prompts import PromptGenerator, Request
from harness.schemas import ClientHealth, Dist

# Client health (README, "Client health"): *saturated* means the client itself is out of CPU; *starved* means
# its event loop runs late while it uses little CPU: the deployment holds the cores. Dispatch delay only counts
# when the client is busy: on this VM the first microseconds after an idle wait run ~40x slower (6 us of work
# took 210 us p50 after a 10 ms sleep), so an idle client at c=1 shows ~1 ms dispatch delays.
CLIENT_CPU_LIMIT_PCT = 90.0
DISPATCH_P95_LIMIT_MS = 1.0
BUSY_CPU_PCT = 25.0
STARVED_CPU_PCT = 50.0  # loop lag at less client CPU than this is starvation, above it saturation
# Loop lag bounds how late a timestamp can be taken. An idle client here shows p99 ~1.75 ms (5 ms ticks,
# millisecond timers, slow wake-ups); a starved loop (a GIL-holding thread at 88% CPU) showed p50 5.6 ms.
LOOP_LAG_P95_LIMIT_MS = 5.0
LAG_TICK_S = 0.005


class LevelRun(BaseModel):
    concurrency: int  # 0 in an open-loop level
    repeat: int
    records: list[dict]  # RequestRecord.to_json() of measured requests (warmup excluded)
    sent: int  # requests the level started; every one is in `records`, also when it was stopped
    aborted: str | None = None  # why the level stopped before its end (the deployment died or is unreachable)
    client: ClientHealth
    process_cpu_s: dict[str, float]  # deployment process label -> CPU seconds during the measured window
    window_s: float
    rate: float | None = None  # open loop (harness/load/openloop.py): the offered request rate, req/s


def judge_client(cpu_pct: float, lag: Dist, dispatch: Dist) -> ClientHealth:
    h = ClientHealth(cpu_pct=cpu_pct, loop_lag_ms=lag, dispatch_delay_ms=dispatch)
    if cpu_pct > CLIENT_CPU_LIMIT_PCT:
        h.saturated = True
        h.reasons.append(f"client saturated: {cpu_pct:.0f}% of a core (> {CLIENT_CPU_LIMIT_PCT:.0f}%); the "
                         "figures measure the client as much as the server")
    if dispatch.p95 is not None and dispatch.p95 > DISPATCH_P95_LIMIT_MS and cpu_pct > BUSY_CPU_PCT:
        h.saturated = True
        h.reasons.append(f"client saturated: dispatch delay p95 {dispatch.p95:.2f} ms (> {DISPATCH_P95_LIMIT_MS} "
                         f"ms) at {cpu_pct:.0f}% CPU; requests went out late, so offered load was below c")
    if lag.p95 is not None and lag.p95 > LOOP_LAG_P95_LIMIT_MS:
        late = f"timestamps late by up to {lag.p99 or lag.p95:.1f} ms (loop lag p99)"
        if cpu_pct < STARVED_CPU_PCT:
            h.starved = True
            h.reasons.append(f"client starved by the deployment: event-loop lag p95 {lag.p95:.1f} ms at only "
                             f"{cpu_pct:.0f}% client CPU; {late}")
        else:
            h.saturated = True
            h.reasons.append(f"client saturated: event-loop lag p95 {lag.p95:.1f} ms at {cpu_pct:.0f}% CPU; {late}")
    return h


async def _lag_monitor(samples: list[float], stop: asyncio.Event) -> None:
    clock = time.perf_counter
    while not stop.is_set():
        t = clock()
        await asyncio.sleep(LAG_TICK_S)
        samples.append(max(0.0, (clock() - t - LAG_TICK_S) * 1e3))


# A level stops when its deployment is gone: the stack says it died (checked every WATCH_S), or every
# request for UNREACHABLE_S failed to connect. A slot backs off after a connect error (up to 1 s) instead of
# firing thousands of refused connections a second at full client CPU.
WATCH_S = 0.25
UNREACHABLE_S = 10.0
BACKOFF_MAX_S = 1.0


class Flow:
    """One closed-loop phase: what was sent and recorded, and why it stopped early (if it did)."""

    def __init__(self, n: int, min_duration_s: float):
        self.n, self.min_ns = n, int(min_duration_s * 1e9)
        self.t0 = time.perf_counter_ns()
        self.sent = self.recorded = 0
        self.records: list[RequestRecord] = []
        self.abort: str | None = None
        # the phase is being stopped (Ctrl-C, a failed write): an open loop's pacer thread may still hand the loop
        # a send it timed before the stop, which must not start a request nobody will wait for
        self.closed = False
        self.connect_errors = 0
        self._unreachable_since: int | None = None

    def take(self) -> int | None:
        if self.abort is None and (self.sent < self.n or time.perf_counter_ns() - self.t0 < self.min_ns):
            self.sent += 1
            return self.sent - 1
        return None

    def reached(self, rec: RequestRecord) -> None:
        """Note whether the server could be reached; sets `abort` after UNREACHABLE_S of connect errors."""
        if rec.error != "connect":
            self._unreachable_since = None
            return
        self.connect_errors += 1
        now = time.perf_counter_ns()
        self._unreachable_since = self._unreachable_since or now
        if now - self._unreachable_since >= UNREACHABLE_S * 1e9 and self.abort is None:
            self.abort = (f"server unreachable: every request for {UNREACHABLE_S:.0f} s failed to connect "
                          f"({self.connect_errors} connect errors)")


async def watch(flow: Flow, tasks: list[asyncio.Task], dead: Callable[[], str | None] | None) -> None:
    while flow.abort is None:
        await asyncio.sleep(WATCH_S)
        if flow.abort is None and dead is not None and (why := dead()):
            flow.abort = f"deployment died: {why}"
    for t in tasks:
        t.cancel()


def stopped(rec: RequestRecord, e: BaseException, flow: Flow) -> None:
    """Marks a request whose measurement was stopped by `e` (a cancellation or a client bug)."""
    rec.ok, rec.t_end_ns = False, time.perf_counter_ns()
    if isinstance(e, asyncio.CancelledError):
        rec.error = "aborted" if flow.abort else "interrupted"
        rec.error_detail = flow.abort or "stopped by Ctrl-C / SIGTERM while in flight"
    else:
        rec.error, rec.error_detail = "client_error", f"{type(e).__name__}: {e}"[:300]


async def send(client: StreamClient, conn, gen: PromptGenerator, rec: RequestRecord, index: int,
               req: Request | None = None) -> None:
    """The request at (rec.level, index, rec.phase), or `req`, measured into rec, which keeps what was asked."""
    req = req or gen.request(rec.level, index, rec.phase)
    rec.input_asked, rec.output_asked = req.input_tokens, req.max_tokens or client.max_tokens
    await client.measure(conn, req.text, rec, req.max_tokens)


class Chat:
    """A closed-loop slot's multi-turn chats (profile `sessions`): slot k of c holds chats k, k + c, k + 2c, ...
    (the same chats on both sides of a compare, whatever the timing), each turn sent after the think time."""

    def __init__(self, gen: PromptGenerator, slot: int, slots: int, repeat: int, think_s: float | None = None):
        """think_s: how long `after` waits (default: the profile's think time; an open loop waits on its own)."""
        assert gen.sessions is not None
        self.gen, self.turns = gen, gen.sessions.turns
        self.think_s = gen.sessions.think_time_s if think_s is None else think_s
        self.chat, self.slots, self.base = slot, slots, repeat * 1_000_000
        self.turn, self.history, self.tokens, self.req = 0, "", 0, None

    def next(self, rec: RequestRecord) -> Request:
        rec.turn, rec.chat = self.turn, self.base + self.chat
        self.req = self.gen.turn(rec.level, self.base + self.chat, self.turn, self.history, self.tokens, rec.phase)
        return self.req

    async def after(self, rec: RequestRecord) -> None:
        """The answer joins the conversation; a failed turn, or the last, ends the chat and the slot starts the
        next one at once; otherwise the user thinks before the next turn."""
        if rec.ok and self.turn + 1 < self.turns and self.req is not None:
            self.turn, self.history = self.turn + 1, f"{self.req.text}{rec.answer}"
            self.tokens = self.req.input_tokens + (rec.output_tokens or 0)
            rec.answer = ""
            if self.think_s:
                await asyncio.sleep(self.think_s)
            return
        self.chat, self.turn, self.history = self.chat + self.slots, 0, ""


def ignore_record(rec: RequestRecord) -> None:
    """The callback of a hook nobody set."""


@dataclass(frozen=True)
class Sender:
    """What a load process sends with: its client, its prompts, and the deployment's cheap liveness check that is
    watched while it sends (None: not watched)."""

    client: StreamClient
    gen: PromptGenerator
    dead: Callable[[], str | None] | None = None


@dataclass(frozen=True)
class Phase:
    """A phase of a level as its records are labelled: the level (closed loop: its concurrency; open loop: its
    rate), the repeat and the phase (warmup-sweep, warmup, measure); keep: the flow keeps the records (a warmup only
    hands them to on_record)."""

    level: float
    repeat: int
    name: str
    keep: bool = True


@dataclass(frozen=True)
class LevelPlan:
    """One closed-loop level: `warmup_waves` unmeasured waves, then `requests` measured ones (for at least
    min_duration_s) with `concurrency` requests in flight."""

    concurrency: int
    requests: int
    repeat: int = 0
    warmup_waves: int = 1
    min_duration_s: float = 0.0


@dataclass(frozen=True)
class Hooks:
    """What a level calls while it runs (closed or open loop): on_record with every request, warmup included;
    on_progress with each measured one; process_cpu samples the deployment's CPU around the measured window;
    on_measure_start as the window opens (e.g. a benchmark resets the server's own statistics there)."""

    on_record: Callable[[RequestRecord], None] = ignore_record
    on_progress: Callable[[RequestRecord], None] = ignore_record
    process_cpu: Callable[[], dict[int, tuple[str, float]]] | None = None
    on_measure_start: Callable[[], None] | None = None


NO_HOOKS = Hooks()


async def drive(sender: Sender, phase: Phase, n: int, min_duration_s: float, conns: list,
                on_record: Callable[[RequestRecord], None]) -> Flow:
    """Every request taken is recorded exactly once (sent = recorded), also when the phase is stopped: by a
    dead deployment (`aborted`), by Ctrl-C / SIGTERM (`interrupted`) or by an error writing results."""
    clock = time.perf_counter_ns
    client, gen, dead = sender.client, sender.gen, sender.dead  # locals: the slots below read them per request
    level, repeat, name, keep = phase.level, phase.repeat, phase.name, phase.keep
    flow = Flow(n, min_duration_s)

    def record(rec: RequestRecord) -> None:
        flow.recorded += 1
        if keep:
            flow.records.append(rec)
        on_record(rec)

    async def slot(k: int, conn) -> None:
        due = clock()
        backoff = 0.0
        chat = Chat(gen, k, len(conns), repeat) if gen.sessions else None
        while (i := flow.take()) is not None:
            rec = RequestRecord(level=level, index=i, repeat=repeat, phase=name, t_due_ns=due)  # type: ignore[arg-type]
            try:
                await send(client, conn, gen, rec, i + repeat * 1_000_000, chat.next(rec) if chat else None)
            except BaseException as e:  # taken means recorded, whatever stopped it
                stopped(rec, e, flow)
                conn.close()
                record(rec)
                raise
            record(rec)
            flow.reached(rec)
            if rec.error == "connect":
                backoff = min(BACKOFF_MAX_S, max(0.05, 2 * backoff))
                await asyncio.sleep(backoff)
            else:
                backoff = 0.0
            if chat is not None:
                await chat.after(rec)
            due = clock()

    tasks = [asyncio.create_task(slot(k, c)) for k, c in enumerate(conns)]
    watcher = asyncio.create_task(watch(flow, tasks, dead))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError:  # Ctrl-C / SIGTERM: the slots record what they had in flight
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        watcher.cancel()
    failed = [t for t in done if not t.cancelled() and t.exception() is not None]
    if failed:  # e.g. results could not be written: stop the other slots, then say why
        flow.abort = flow.abort or f"stopped: {failed[0].exception()}"
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise failed[0].exception()  # type: ignore[misc]
    await asyncio.gather(*tasks, return_exceptions=True)  # the watcher's cancellations
    return flow


async def warm(sender: Sender, concurrency: int, waves: int,
               on_record: Callable[[RequestRecord], None] = ignore_record) -> str | None:
    """Unmeasured waves at one level (the warmup sweep before the first measured level); returns why it
    stopped early, if it did."""
    conns = [sender.client.connection() for _ in range(concurrency)]
    try:
        flow = await drive(sender, Phase(concurrency, 0, "warmup-sweep", keep=False), waves * concurrency, 0.0,
                           conns, on_record)
        return flow.abort
    finally:
        for c in conns:
            c.close()


async def run_level(sender: Sender, plan: LevelPlan, hooks: Hooks = NO_HOOKS) -> LevelRun:
    concurrency, repeat = plan.concurrency, plan.repeat
    conns = [sender.client.connection() for _ in range(concurrency)]
    try:
        if plan.warmup_waves:
            warmup = await drive(sender, Phase(concurrency, repeat, "warmup", keep=False),
                                 plan.warmup_waves * concurrency, 0.0, conns, hooks.on_record)
            if warmup.abort:
                return LevelRun(concurrency=concurrency, repeat=repeat, records=[], sent=0, aborted=warmup.abort,
                                client=judge_client(0.0, Dist(), Dist()), process_cpu_s={}, window_s=0.0)
        w = await measured_window(
            lambda measured: drive(sender, Phase(concurrency, repeat, "measure"), plan.requests, plan.min_duration_s,
                                   conns, measured),
            hooks)
    finally:
        for c in conns:
            c.close()
    records = w.flow.records
    disp_d = Dist.of([r.dispatch_delay_ms for r in records])
    return LevelRun(
        concurrency=concurrency, repeat=repeat, records=[r.to_json() for r in records], sent=w.flow.sent,
        aborted=w.flow.abort, client=judge_client(w.cpu_pct, w.lag, disp_d),
        process_cpu_s=w.process_cpu_s, window_s=w.window_s,
    )


@dataclass
class Window:
    """A measured window: its flow, the client's CPU and loop lag, and the deployment's CPU during it."""

    flow: Flow
    window_s: float
    cpu_pct: float  # of one core
    lag: Dist
    process_cpu_s: dict[str, float]


async def measured_window(run: Callable[[Callable[[RequestRecord], None]], Awaitable[Flow]],
                          hooks: Hooks) -> Window:
    """Runs one measured phase (`run(on_record)`, closed or open loop) with the client's CPU, its event-loop lag
    and the deployment's CPU sampled around it."""
    on_record, on_progress, process_cpu = hooks.on_record, hooks.on_progress, hooks.process_cpu
    on_measure_start = hooks.on_measure_start
    try:
        # Everything alive now (imports, warmup, earlier levels) is moved out of the collector's reach for the
        # window: a full collection of it took 40-70 ms here, a pause every in-flight stream's timestamps would
        # carry; young collections keep running and stay cheap. Undone after the window.
        gc.collect()
        gc.freeze()
        if on_measure_start:  # e.g. a benchmark resets the server's own statistics here
            on_measure_start()

        def measured(rec: RequestRecord) -> None:
            on_record(rec)
            on_progress(rec)

        proc = psutil.Process()
        lag: list[float] = []
        stop = asyncio.Event()
        monitor = asyncio.create_task(_lag_monitor(lag, stop))
        cpu0, wall0 = proc.cpu_times(), time.perf_counter()
        dep0 = process_cpu() if process_cpu else {}
        flow = await run(measured)
        window = time.perf_counter() - wall0
        cpu1 = proc.cpu_times()
        dep1 = process_cpu() if process_cpu else {}
        stop.set()
        await monitor
    finally:
        gc.unfreeze()
    cpu_pct = 100.0 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / window if window > 0 else 0.0
    dep_cpu: dict[str, float] = {}  # per label: processes started during the level count from zero
    for pid, (label, cpu) in dep1.items():
        dep_cpu[label] = dep_cpu.get(label, 0.0) + max(0.0, cpu - dep0.get(pid, (label, 0.0))[1])
    return Window(flow, window, cpu_pct, Dist.of(lag), dep_cpu)
