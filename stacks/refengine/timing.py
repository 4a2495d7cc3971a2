"""Sub-millisecond sleeps for asyncio servers.

asyncio's timers wake through epoll_wait, whose timeout is whole milliseconds (rounded up), so a token due
in 10.2 ms is sent at ~11 ms. The reference engine and the known-overhead proxy must be on time to a
fraction of a millisecond, so deadlines are kept by one thread that nanosleeps to the earliest one and
wakes the event loop (call_soon_threadsafe). The switch interval is lowered so the timer thread gets the GIL
promptly while the loop is busy.

What remains is the machine: on this VM an idle vCPU takes 0.3-2 ms to wake the loop thread from epoll, so
the servers record the times they actually sent at, and benchmarks compare clients with those."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import sys
import threading
import time

SPIN_NS = 50_000  # deadlines this close are treated as due (cost of waking the loop is about this)


class PreciseTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._heap: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stop = False
        sys.setswitchinterval(0.0002)
        self._thread = threading.Thread(target=self._run, name="precise-timer", daemon=True)
        self._thread.start()

    def sleep_until(self, deadline_ns: int) -> asyncio.Future:
        """Awaitable that resolves at perf_counter_ns() >= deadline_ns (within ~0.1 ms)."""
        fut = self.loop.create_future()
        if deadline_ns - time.perf_counter_ns() <= SPIN_NS:
            fut.set_result(None)
            return fut
        with self._cv:
            heapq.heappush(self._heap, (deadline_ns, next(self._seq), fut))
            if self._heap[0][2] is fut:
                self._cv.notify()
        return fut

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=2)

    @staticmethod
    def _fire(futs: list[asyncio.Future]) -> None:
        for f in futs:
            if not f.done():
                f.set_result(None)

    def _run(self) -> None:
        clock = time.perf_counter_ns
        while True:
            with self._cv:
                while not self._heap and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                wait_ns = self._heap[0][0] - clock()
                if wait_ns > SPIN_NS:
                    # woken early by a nearer deadline or by close(); re-check either way
                    self._cv.wait(timeout=(wait_ns - SPIN_NS // 2) / 1e9)
                    continue
                due = []
                now = clock() + SPIN_NS
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
            if due:
                try:
                    self.loop.call_soon_threadsafe(self._fire, due)
                except RuntimeError:  # loop closed
                    return
