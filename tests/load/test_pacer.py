"""The open-loop pacer: every send handed to the loop in order, never before its deadline, and none after a stop."""

from __future__ import annotations

import asyncio
import time

from harness.load.pacer import pace


def test_every_send_fires_in_order_and_never_early():
    fired: list[tuple[int, int, int]] = []

    async def go() -> None:
        t0 = time.perf_counter_ns()
        offsets = [i * 500_000 for i in range(200)]  # 2,000 req/s for 0.1 s
        await pace(offsets, t0, lambda i, due: fired.append((i, due, time.perf_counter_ns())), lambda: False)

    asyncio.run(go())
    assert [i for i, _, _ in fired] == list(range(200))
    assert all(at >= due for _, due, at in fired)


def test_a_stop_ends_the_schedule_before_its_next_send():
    fired: list[int] = []

    async def go() -> None:
        t0 = time.perf_counter_ns()
        # 20 ms apart: each send has reached the loop long before the next deadline asks stopped()
        await pace([i * 20_000_000 for i in range(100)], t0, lambda i, due: fired.append(i), lambda: len(fired) >= 5)

    asyncio.run(go())
    assert fired == [0, 1, 2, 3, 4]


def test_a_cancelled_schedule_stops_its_thread():
    fired: list[int] = []

    async def go() -> None:
        task = asyncio.create_task(pace([i * 10_000_000 for i in range(100)], time.perf_counter_ns(),
                                        lambda i, due: fired.append(i), lambda: False))
        while len(fired) < 2:
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        n = len(fired)
        await asyncio.sleep(0.05)  # five more deadlines pass: a thread still running would fire them
        assert len(fired) <= n + 1  # at most the one handed over as the stop came

    asyncio.run(go())
