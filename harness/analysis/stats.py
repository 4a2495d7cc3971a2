"""Per-level statistics from request records: latency percentiles, throughput, goodput.

Definitions (README, "Measurement definitions"): TTFT to the first text-carrying event; chunk ITL = gaps
between content events; TPOT = (E2E - TTFT) / (output_tokens - 1); throughput = output tokens of
successful requests / level wall time; goodput = good requests / ALL sent requests (failures are misses).

Open-loop levels (a `rate`) count TTFT and E2E from each request's scheduled send time (`t_due_ns`), so a
server that falls behind its arrivals cannot hide the queue (coordinated omission); ITL and TPOT are gaps and do
not move. They are checked against their schedule: `off_schedule` says when the client could not keep to it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from harness.analysis.steady import stationarity, ttft_modes
from harness.load.client import RequestRecord
from harness.profile.schema import SLO
from harness.schemas import Dist, LevelStats

# Off schedule (LevelStats.off_schedule), open loop only. The client sends request i at t0 + its scheduled
# offset; a level is flagged when
# - it sent slower than its schedule: (n - 1) / (last actual send - first scheduled send) is more than
#   RATE_MARGIN below (n - 1) / (last scheduled send - first scheduled send). Against the schedule as drawn, not
#   the offered rate: a Poisson sample of n gaps has a rate off by ~1/sqrt(n) (18% at 30 requests) by chance;
#   for constant arrivals the two are the same. A client falling behind piles its lateness onto the last send.
# - or its lateness (scheduled -> the request's task began) p95 exceeds max(LATE_FLOOR_MS, LATE_GAP_SHARE x the
#   mean gap 1/rate). The floor: asyncio timers wake on whole milliseconds and an idle client here wakes up to
#   ~2 ms late (loop lag p99 1.75 ms), which is the event loop, not a client that cannot keep up (the same 5 ms
#   as runner.LOOP_LAG_P95_LIMIT_MS). A quarter of the mean gap: later than that, requests meant to be spread
#   out arrive bunched, and the server sees a burstier load than the one offered.
RATE_MARGIN = 0.05
LATE_FLOOR_MS = 5.0
LATE_GAP_SHARE = 0.25


def late_bound_ms(rate: float) -> float:
    return max(LATE_FLOOR_MS, LATE_GAP_SHARE * 1e3 / rate)


def schedule_check(records: Sequence[RequestRecord], rate: float) -> tuple[float | None, float | None, str | None]:
    """(scheduled rate, achieved rate, why the level is off schedule or None) of an open-loop level."""
    sent = [r for r in records if r.t_task_ns]
    if len(sent) < 2:
        return None, None, None
    first = min(r.t_due_ns for r in sent)
    span_due = max(r.t_due_ns for r in sent) - first
    span_sent = max(r.t_task_ns for r in sent) - first
    scheduled = (len(sent) - 1) / (span_due / 1e9) if span_due > 0 else None
    achieved = (len(sent) - 1) / (span_sent / 1e9) if span_sent > 0 else None
    late = Dist.of([r.dispatch_delay_ms for r in sent])
    bound = late_bound_ms(rate)
    why = []
    if scheduled is not None and achieved is not None and achieved < (1 - RATE_MARGIN) * scheduled:
        why.append(f"sent {len(sent)} requests at {achieved:.1f} req/s against a schedule of {scheduled:.1f} req/s "
                   f"(offered {rate:g}; more than {100 * RATE_MARGIN:.0f}% slower)")
    if late.p95 is not None and late.p95 > bound:
        why.append(f"requests started {late.p95:.1f} ms after their scheduled time at p95 (bound {bound:.1f} ms)")
    reason = None
    if why:
        reason = ("the client could not keep to the schedule: " + "; ".join(why)
                  + ": the server was offered less, or burstier, load than the rate says")
    return scheduled, achieved, reason


def from_schedule(r: RequestRecord) -> RequestRecord:
    """An open-loop record with TTFT and E2E counted from its scheduled send time (event gaps are unchanged);
    level 0: an open loop has no first wave of c requests (steady.stationarity)."""
    late = (r.t_start_ns - r.t_due_ns) / 1e6
    return replace(r, level=0, ttft_ms=None if r.ttft_ms is None else r.ttft_ms + late,
                   e2e_ms=None if r.e2e_ms is None else r.e2e_ms + late)


def is_good(r: RequestRecord, slo: SLO) -> bool:
    if not r.ok or r.ttft_ms is None or r.e2e_ms is None:
        return False
    if r.ttft_ms > slo.ttft_s * 1e3 or r.e2e_ms > slo.e2e_s * 1e3:
        return False
    if slo.tpot_s is not None and (t := tpot(r)) is not None and t > slo.tpot_s * 1e3:
        return False
    if slo.itl_p95_s is not None and len(r.event_ms) > 2:
        if np.percentile(np.diff(r.event_ms), 95) > slo.itl_p95_s * 1e3:
            return False
    return True


def tpot(r: RequestRecord) -> float | None:
    if not r.ok or not r.output_tokens or r.output_tokens < 2 or r.ttft_ms is None or r.e2e_ms is None:
        return None
    return (r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1)


# The steady part of a closed-loop window must last at least this share of its full-load period (first start to
# last start) to be used; a shorter one (few requests per slot) leaves the window's own rate in its place.
MIN_STEADY_SHARE = 0.25


def steady_window(ok: Sequence[RequestRecord], concurrency: int) -> tuple[int, int] | None:
    """(open, close) of a closed-loop window's steady part, in ns: it opens once every one of the window's first c
    requests has its first token (all c slots decoding: the prefill queue of c requests sent at once from idle is
    behind it) and closes at the last request's start (after it the loop drains). None when too short."""
    by_start = sorted(ok, key=lambda r: r.t_start_ns)
    first = by_start[:concurrency]
    if len(by_start) <= concurrency or any(r.ttft_ms is None for r in first):
        return None
    opened = max(r.t_start_ns + int(r.ttft_ms * 1e6) for r in first)
    closed = by_start[-1].t_start_ns
    if closed - opened < MIN_STEADY_SHARE * (closed - by_start[0].t_start_ns) or closed <= opened:
        return None
    return opened, closed


def tokens_between(ok: Sequence[RequestRecord], t0: int, t1: int) -> float:
    """Output tokens of the content events between t0 and t1 (ns), each request's tokens spread evenly over its
    events (usage counts them; events may carry several)."""
    total = 0.0
    for r in ok:
        if not r.output_tokens or not r.event_ms:
            continue
        at = r.t_start_ns + np.asarray(r.event_ms) * 1e6
        total += float(((at >= t0) & (at < t1)).sum()) * r.output_tokens / len(r.event_ms)
    return total


def level_stats(records: Sequence[RequestRecord], concurrency: int, slo: SLO, repeat: int = 0,
                rate: float | None = None) -> LevelStats:
    """rate: an open-loop level's offered rate (concurrency is then 0): latency counts from the schedule."""
    schedule: tuple[float | None, float | None, str | None] = (None, None, None)
    if rate is not None:
        schedule = schedule_check(records, rate)
        records = [from_schedule(r) for r in records]
    sent = len(records)
    ok = [r for r in records if r.ok]
    if records:  # an open loop's window opens at its first scheduled send
        start = min(r.t_due_ns if rate is not None else r.t_start_ns for r in records)
        wall_s = (max(r.t_end_ns for r in records) - start) / 1e9
    else:
        wall_s = 0.0
    tokens = sum(r.output_tokens or 0 for r in ok)
    itl = [g for r in ok for g in np.diff(r.event_ms)] if ok else []
    chunks = sum(len(r.event_ms) for r in ok)
    # content events stamped at one read arrived together: a layer that holds tokens and writes them at once
    # (Ray Serve LLM's batcher sends each token as its own event, in one write) shows as fewer arrivals than events
    arrivals = [np.unique(r.event_ms) for r in ok if r.event_ms]
    n_arrivals = sum(len(a) for a in arrivals)
    good = sum(is_good(r, slo) for r in records)
    per_s = (lambda x: x / wall_s) if wall_s > 0 else (lambda x: 0.0)
    window = steady_window(ok, concurrency) if rate is None else None
    return LevelStats(
        concurrency=concurrency,
        repeat=repeat,
        sent=sent,
        succeeded=len(ok),
        failed=sent - len(ok),
        errors=dict(Counter(r.error for r in records if not r.ok)),
        wall_s=wall_s,
        output_tokens=tokens,
        throughput_tok_s=per_s(tokens),
        request_rate=per_s(len(ok)),
        goodput=good / sent if sent else 0.0,
        good_rps=per_s(good),
        ttft_ms=Dist.of([r.ttft_ms for r in ok]),
        itl_ms=Dist.of(itl),
        tpot_ms=Dist.of([t for r in ok if (t := tpot(r)) is not None]),
        e2e_ms=Dist.of([r.e2e_ms for r in ok]),
        tokens_per_chunk=tokens / chunks if chunks else None,
        tokens_per_arrival=tokens / n_arrivals if n_arrivals else None,
        arrival_gap_ms=Dist.of([g for a in arrivals for g in np.diff(a)]),
        dispatch_delay_ms=Dist.of([r.dispatch_delay_ms for r in records]),
        steady=stationarity(records, window[0] if window else None),
        steady_tok_s=tokens_between(ok, *window) / ((window[1] - window[0]) / 1e9) if window else None,
        steady_s=(window[1] - window[0]) / 1e9 if window else None,
        ttft_modes=ttft_modes(records),
        rate=rate,
        scheduled_rate=schedule[0],
        achieved_rate=schedule[1],
        off_schedule=schedule[2],
    )
