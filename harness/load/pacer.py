"""Open-loop send times kept to the microsecond instead of the event loop's millisecond: a thread sleeps until
each request's absolute deadline (clock_nanosleep, then a short yielding spin for the last SPIN_NS) and hands the
send to the loop with call_soon_threadsafe, which wakes it at once.

Why: asyncio's timers wait in epoll, whose timeout is whole milliseconds rounded up, so a request due in 0.3 ms
went out up to 1 ms late, and at 1,000 req/s that is the whole gap. The thread needs the GIL to hand a send over;
CPython lets a waiting thread in only every switch interval (5 ms by default) while the loop's thread runs
Python, so the interval is lowered to SWITCH_S while a schedule runs."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable

SPIN_NS = 60_000  # sleep until this close to the deadline, then yield in a loop: a timer wake-up is ~50 us late
SWITCH_S = 0.0002


async def pace(offsets: list[int], t0: int, fire: Callable[[int, int], None], stopped: Callable[[], bool]) -> None:
    """Calls fire(i, due) on the running loop at t0 + offsets[i] (perf_counter ns) for each i, until stopped()."""
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    clock = time.perf_counter_ns

    def work() -> None:
        for i, off in enumerate(offsets):
            due = t0 + off
            while (left := due - clock()) > 0 and not stop.is_set():
                time.sleep((left - SPIN_NS) / 1e9 if left > SPIN_NS else 0)
            if stop.is_set() or stopped():
                return
            loop.call_soon_threadsafe(fire, i, due)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)
    thread = loop.run_in_executor(None, work)
    try:
        await thread
    finally:  # cancelled (Ctrl-C, a dead deployment) or done: the thread stops before the next send
        stop.set()
        sys.setswitchinterval(switch)


def probe(offsets: list[int]) -> tuple[float, float]:
    """(lateness p99 in ms, achieved over scheduled rate) of pacing `offsets` (ns) on this host, each send a task
    that does nothing, as each real one is a task: what the pacer and the event loop hold at the least, before a
    trace's busiest second is offered to a deployment."""
    late: list[int] = []

    async def go() -> None:
        clock = time.perf_counter_ns
        tasks: list[asyncio.Task] = []

        async def send(due: int) -> None:
            late.append(clock() - due)

        await pace(offsets, clock(), lambda i, due: tasks.append(asyncio.create_task(send(due))), lambda: False)
        await asyncio.gather(*tasks)

    asyncio.run(go())
    late.sort()
    p99 = late[min(len(late) - 1, int(0.99 * len(late)))] / 1e6 if late else 0.0
    span = offsets[-1] - offsets[0] if len(offsets) > 1 else 0
    sent = span + late[-1] - late[0] if late else 0
    return p99, (span / sent if sent > 0 else 1.0)
