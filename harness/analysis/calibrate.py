"""Before a GPU-like compare measures anything, what this host can emulate (the dtype is chosen by
harness/host/dtype.py).

- The levels (`levels_held`): the first deployment's warmup sweep on the bare engine gives each level's step as
  the client sees it (each request's median gap between tokens, averaged over the requests). A level is held when
  that is within TOLERANCE of the configured step for c decoding sequences; the compare keeps the profile's levels
  up to the highest one held, and says which it left out and why.
- Enough samples (`more_waves`): one wave at c=1 is one request, 15 gaps for 16 tokens, and a compare once lost
  its c=1 on one such request reading 6.9 ms against 6.0 configured; another's read 2.8 ms, a 43 ms stall then
  tokens bunched. The level's first wave meets its batch shapes (a compiled engine compiles them there) and is
  not counted. Then the sweep sends more waves at the level until it has MIN_GAPS gaps and its estimate's 95%
  interval lies on one side of the tolerance's bound (at most MAX_WAVES waves or MAX_S seconds, then the estimate
  decides as it stands). A level held wrongly is measured and then called host-bound by its windows' own step
  check (the windows' time is lost, not the verdict); a level left out wrongly is never measured (at c=1, the
  study's first level). Both are rarer with the interval away from the bound."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from harness.load.client import RequestRecord
from harness.profile.engine import EmulatedStep
from harness.schemas import Calibration, LevelHold
from harness.schemas.window import TOLERANCE

MIN_GAPS = 300  # token gaps at a level before it is held or left out: 20 requests of 16 tokens at c=1
MAX_WAVES = 40
MAX_S = 20.0  # the most a level's calibration sends for (a slow level: 40 waves at 64 tokens of a 20 ms step)


def request_medians(events: Iterable[Sequence[float]]) -> list[float]:
    """Each request's median gap between tokens (ms), from its event times, for requests with at least 2 gaps."""
    return [float(np.median(np.diff(e))) for e in events if len(e) > 2]


def _medians(records: Sequence[RequestRecord]) -> list[float]:
    return request_medians(r.event_ms for r in records if r.ok)


def more_waves(step: EmulatedStep, c: int, records: Sequence[RequestRecord], waves: int, elapsed_s: float) -> bool:
    """Whether level c's calibration needs another wave: too few gaps so far, or an estimate whose 95% interval
    still holds the tolerance's bound (requests of one wave share their batch: the interval is a rule for when
    to stop sampling, not a claim)."""
    if waves >= MAX_WAVES or elapsed_s >= MAX_S:
        return False
    if sum(len(r.event_ms) - 1 for r in records if r.ok and len(r.event_ms) > 2) < MIN_GAPS:
        return True
    medians = _medians(records)
    if len(medians) < 2:
        return False
    half = 1.96 * float(np.std(medians, ddof=1)) / np.sqrt(len(medians))
    return abs(float(np.mean(medians)) - (1 + TOLERANCE) * step.ms(c)) < half


def levels_held(step: EmulatedStep, waves: Mapping[int, Sequence[RequestRecord]]) -> Calibration:
    """waves: level -> the calibration waves' records at that level (its first wave not among them), bare engine."""
    checks = []
    for c, records in sorted(waves.items()):
        gaps = _medians(records)
        checks.append(LevelHold(level=c, measured_ms=float(np.mean(gaps)) if gaps else None,
                                configured_ms=step.ms(c), requests=len(gaps)))
    held = [h.level for h in checks if h.held]
    top = max(held, default=0)
    kept = [h.level for h in checks if h.level <= top]
    left_out = {h.level: (f"the host stretched the emulated step to {h.measured_ms:.1f} ms against "
                          f"{h.configured_ms:.1f} ms configured at its calibration ({h.requests} requests)"
                          if h.measured_ms is not None else "its calibration measured no step")
                + f" (beyond the highest level held, c={top})"
                if top else "no level held the emulated step"
                for h in checks if h.level > top}
    return Calibration(checks=checks, kept=kept, left_out=left_out)
