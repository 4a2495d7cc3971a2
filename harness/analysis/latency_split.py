"""Where the latency went: per level, the engine's own mean TTFT and E2E (its histograms' _sum/_count deltas over
the measured window, under the engine's names or the ones its stack declares) beside the client's mean.
client − engine is the time spent outside the engine: the network, the API server and, behind a layer, the
layer. On the baseline it is the API server's share; the stack's minus the baseline's is the layer's.

The two sides of a row count nearly the same requests: the engine's window runs between the window's edge
scrapes, the client's over the requests it measured. A window whose engine count differs from the client's by
more than COUNT_TOLERANCE (Ray Serve's metrics agent exports with a lag, so its window is shifted, measured on
this project's 2-core host: 21 to 91 engine requests against the client's 40) is left out of the engine's mean,
and the row says so."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from harness.schemas import LevelSummary, RunSummary

COUNT_TOLERANCE = 0.1


class SideSplit(BaseModel):
    client_ttft_ms: float | None
    engine_ttft_ms: float | None  # None: this side's endpoints do not expose the engine's histograms
    client_e2e_ms: float | None
    engine_e2e_ms: float | None
    client_requests: float  # mean per repeat
    engine_requests: float | None
    count_off: bool = False  # some windows' histograms counted other requests (a lagging export): left out

    @property
    def outside_ttft_ms(self) -> float | None:
        return _minus(self.client_ttft_ms, self.engine_ttft_ms)

    @property
    def outside_e2e_ms(self) -> float | None:
        return _minus(self.client_e2e_ms, self.engine_e2e_ms)


class LevelSplit(BaseModel):
    level: int | float  # a concurrency, or an open-loop level's rate
    baseline: SideSplit | None
    stack: SideSplit | None

    @property
    def layer_ttft_ms(self) -> float | None:
        """What the layer added to TTFT outside the engine: the stack's outside share less the baseline's."""
        return _minus(self.stack and self.stack.outside_ttft_ms, self.baseline and self.baseline.outside_ttft_ms)

    @property
    def layer_e2e_ms(self) -> float | None:
        return _minus(self.stack and self.stack.outside_e2e_ms, self.baseline and self.baseline.outside_e2e_ms)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def mean_of(vals: list[float | None]) -> float | None:
    """The mean of the values that were measured; None when none were."""
    got = [v for v in vals if v is not None]
    return float(np.mean(got)) if got else None


def counted_off(lv: LevelSummary) -> bool:
    """The engine's histograms over this window counted more than COUNT_TOLERANCE other requests than the client
    (an exporter that lags, as Ray's metrics agent does, shifts its window)."""
    n, ok = lv.server.engine_requests, lv.stats.succeeded
    return n is not None and bool(ok) and abs(n - ok) > COUNT_TOLERANCE * ok


def side_split(levels: list[LevelSummary]) -> SideSplit | None:
    """Means over the repeats of one level; the engine's only over the windows whose histograms counted the
    client's requests (count_off: some did not). None when nothing complete was measured."""
    done = [lv for lv in levels if lv.incomplete is None]
    if not done:
        return None
    counted = [lv for lv in done if lv.server.engine_requests is not None]  # a missed edge scrape counts none
    matched = [lv for lv in counted if not counted_off(lv)]
    # client − engine pairs the same windows: the client's mean follows the engine's repeats when any matched
    basis = matched or done
    return SideSplit(client_ttft_ms=mean_of([lv.stats.ttft_ms.mean for lv in basis]),
                     engine_ttft_ms=mean_of([lv.server.engine_ttft_ms for lv in matched]),
                     client_e2e_ms=mean_of([lv.stats.e2e_ms.mean for lv in basis]),
                     engine_e2e_ms=mean_of([lv.server.engine_e2e_ms for lv in matched]),
                     client_requests=float(np.mean([lv.stats.succeeded for lv in basis])),
                     engine_requests=mean_of([lv.server.engine_requests for lv in basis]),
                     count_off=len(matched) < len(counted))


def split(runs: dict[str, RunSummary]) -> list[LevelSplit]:
    """One row per level measured by either side of a compare (runs keyed "baseline" and "stack")."""
    levels = sorted({lv.stats.level for run in runs.values() for lv in run.levels})
    out = []
    for c in levels:
        sides = {label: side_split([lv for lv in run.levels if lv.stats.level == c]) for label, run in runs.items()}
        out.append(LevelSplit(level=c, baseline=sides.get("baseline"), stack=sides.get("stack")))
    return out


def _no_engine(s: SideSplit) -> bool:
    return s.engine_ttft_ms is None and s.engine_e2e_ms is None


def hidden(rows: list[LevelSplit], label: str) -> bool:
    """True when that side measured levels but none of them exposed the engine's histograms (a side whose
    histograms were there but counted other requests is lagging, not hidden)."""
    sides = [getattr(r, label) for r in rows if getattr(r, label) is not None]
    return bool(sides) and all(_no_engine(s) and not s.count_off for s in sides)


def lagging(rows: list[LevelSplit], label: str) -> bool:
    """True when that side exposed the engine's histograms but every window counted other requests."""
    sides = [getattr(r, label) for r in rows if getattr(r, label) is not None]
    return bool(sides) and all(_no_engine(s) for s in sides) and any(s.count_off for s in sides)
