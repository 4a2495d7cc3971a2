"""Closed-loop load: exactly `c` requests in flight per level, after a warmup wave of distinct prompts.

Each of the c slots owns a keep-alive connection and sends its next request as soon as the previous one
ends; the time between those two moments is the dispatch delay, a direct measure of the client being slow.
The runner also samples the client's CPU and event-loop lag, and the CPU time of every process of the
deployment, so a report can say where the CPU went and whether the load generator was saturated or starved."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

import psutil
from pydantic import BaseModel

from harness.client import RequestRecord, StreamClient
from harness.prompts import PromptGenerator
from harness.stats import Dist

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


class ClientHealth(BaseModel):
    cpu_pct: float  # of one core, whole client process (event loop; the scraper is its own process)
    loop_lag_ms: Dist
    dispatch_delay_ms: Dist
    saturated: bool = False  # the client is out of CPU: figures are the client's as much as the server's
    starved: bool = False  # the deployment holds the cores: timestamps late by up to the loop lag
    reasons: list[str] = []


class LevelRun(BaseModel):
    concurrency: int
    repeat: int
    records: list[dict]  # RequestRecord.to_json() of measured requests (warmup excluded)
    client: ClientHealth
    process_cpu_s: dict[str, float]  # deployment process label -> CPU seconds during the measured window
    window_s: float


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


async def _drive(client: StreamClient, gen: PromptGenerator, level: int, repeat: int, phase: str,
                 n: int, min_duration_s: float, conns: list, on_record: Callable[[RequestRecord], None]
                 ) -> list[RequestRecord]:
    clock = time.perf_counter_ns
    records: list[RequestRecord] = []
    issued = 0
    t0 = clock()
    min_ns = int(min_duration_s * 1e9)

    def take() -> int | None:
        nonlocal issued
        if issued < n or clock() - t0 < min_ns:
            issued += 1
            return issued - 1
        return None

    async def slot(conn) -> None:
        due = clock()
        while (i := take()) is not None:
            rec = RequestRecord(level=level, index=i, repeat=repeat, phase=phase, t_due_ns=due)
            await client.measure(conn, gen.prompt(level, i + repeat * 1_000_000, phase), rec)
            records.append(rec)
            on_record(rec)
            due = clock()

    await asyncio.gather(*(slot(c) for c in conns))
    return records


async def warm(client: StreamClient, gen: PromptGenerator, concurrency: int, waves: int,
               on_record: Callable[[RequestRecord], None] = lambda r: None) -> None:
    """Unmeasured waves at one level (the warmup sweep before the first measured level)."""
    conns = [client.connection() for _ in range(concurrency)]
    try:
        await _drive(client, gen, concurrency, 0, "warmup-sweep", waves * concurrency, 0.0, conns, on_record)
    finally:
        for c in conns:
            c.close()


async def run_level(client: StreamClient, gen: PromptGenerator, concurrency: int, n_requests: int,
                    *, repeat: int = 0, warmup_waves: int = 1, min_duration_s: float = 0.0,
                    on_record: Callable[[RequestRecord], None] = lambda r: None,
                    on_progress: Callable[[RequestRecord], None] = lambda r: None,
                    process_cpu: Callable[[], dict[int, tuple[str, float]]] | None = None,
                    on_measure_start: Callable[[], None] | None = None) -> LevelRun:
    conns = [client.connection() for _ in range(concurrency)]
    try:
        if warmup_waves:
            await _drive(client, gen, concurrency, repeat, "warmup", warmup_waves * concurrency, 0.0, conns,
                         on_record)

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
        records = await _drive(client, gen, concurrency, repeat, "measure", n_requests, min_duration_s, conns,
                               measured)
        window = time.perf_counter() - wall0
        cpu1 = proc.cpu_times()
        dep1 = process_cpu() if process_cpu else {}
        stop.set()
        await monitor
    finally:
        gc.unfreeze()
        for c in conns:
            c.close()
    cpu_pct = 100.0 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / window if window > 0 else 0.0
    lag_d = Dist.of(lag)
    disp_d = Dist.of([r.dispatch_delay_ms for r in records])
    dep_cpu: dict[str, float] = {}  # per label: processes started during the level count from zero
    for pid, (label, cpu) in dep1.items():
        dep_cpu[label] = dep_cpu.get(label, 0.0) + max(0.0, cpu - dep0.get(pid, (label, 0.0))[1])
    return LevelRun(
        concurrency=concurrency, repeat=repeat, records=[r.to_json() for r in records],
        client=judge_client(cpu_pct, lag_d, disp_d),
        process_cpu_s=dep_cpu, window_s=window,
    )
