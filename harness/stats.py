"""Per-level statistics from request records: latency percentiles, throughput, goodput.

Definitions (README, "Measurement definitions"): TTFT to the first text-carrying event; chunk ITL = gaps
between content events; TPOT = (E2E - TTFT) / (output_tokens - 1); throughput = output tokens of
successful requests / level wall time; goodput = good requests / ALL sent requests (failures are misses)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from harness.client import RequestRecord
from harness.profile import SLO
from harness.steady import Modes, Stationarity, stationarity, ttft_modes

PCTS = (50, 90, 95, 99)


class Dist(BaseModel):
    """Percentiles in ms (numpy's default linear interpolation); None where there is no data."""

    n: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Dist:
        a = np.asarray(values, dtype=float)
        if a.size == 0:
            return cls()
        p = np.percentile(a, PCTS)
        return cls(n=int(a.size), mean=float(a.mean()), p50=float(p[0]), p90=float(p[1]), p95=float(p[2]),
                   p99=float(p[3]), max=float(a.max()))


class LevelStats(BaseModel):
    concurrency: int
    repeat: int = 0
    sent: int
    succeeded: int
    failed: int
    errors: dict[str, int]
    wall_s: float
    output_tokens: int
    throughput_tok_s: float
    request_rate: float
    goodput: float  # share of all sent requests
    good_rps: float
    ttft_ms: Dist
    itl_ms: Dist
    tpot_ms: Dist
    e2e_ms: Dist
    tokens_per_chunk: float | None
    dispatch_delay_ms: Dist
    steady: Stationarity = Stationarity(steady=None)
    ttft_modes: Modes | None = None


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


def level_stats(records: Sequence[RequestRecord], concurrency: int, slo: SLO, repeat: int = 0) -> LevelStats:
    sent = len(records)
    ok = [r for r in records if r.ok]
    if records:
        wall_s = (max(r.t_end_ns for r in records) - min(r.t_start_ns for r in records)) / 1e9
    else:
        wall_s = 0.0
    tokens = sum(r.output_tokens or 0 for r in ok)
    itl = [g for r in ok for g in np.diff(r.event_ms)] if ok else []
    chunks = sum(len(r.event_ms) for r in ok)
    good = sum(is_good(r, slo) for r in records)
    per_s = (lambda x: x / wall_s) if wall_s > 0 else (lambda x: 0.0)
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
        dispatch_delay_ms=Dist.of([r.dispatch_delay_ms for r in records]),
        steady=stationarity(records),
        ttft_modes=ttft_modes(records),
    )
