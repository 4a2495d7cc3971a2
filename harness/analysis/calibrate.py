"""Before a GPU-like compare measures anything, what this host can emulate (the dtype is chosen by
harness/host/dtype.py).

- The levels (`levels_held`): the first deployment's warmup sweep, one wave per level on the bare engine, gives
  each level's step as the client sees it (each request's median gap between tokens). A level is held when that
  is within TOLERANCE of the configured step for c decoding sequences; the compare keeps the profile's levels up to
  the highest one held, and says which it left out and why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from harness.load.client import RequestRecord
from harness.profile.engine import EmulatedStep
from harness.schemas import Calibration, LevelHold


def levels_held(step: EmulatedStep, waves: Mapping[int, Sequence[RequestRecord]]) -> Calibration:
    """waves: level -> the warmup wave's records at that level, on the bare engine."""
    checks = []
    for c, records in sorted(waves.items()):
        gaps = [float(np.median(np.diff(r.event_ms))) for r in records if r.ok and len(r.event_ms) > 2]
        checks.append(LevelHold(level=c, measured_ms=float(np.mean(gaps)) if gaps else None,
                                configured_ms=step.ms(c)))
    held = [h.level for h in checks if h.held]
    top = max(held, default=0)
    kept = [h.level for h in checks if h.level <= top]
    left_out = {h.level: (f"the host stretched the emulated step to {h.measured_ms:.1f} ms against "
                          f"{h.configured_ms:.1f} ms configured at its calibration wave" if h.measured_ms is not None
                          else "its calibration wave measured no step") + f" (beyond the highest level held, c={top})"
                if top else "no level held the emulated step"
                for h in checks if h.level > top}
    return Calibration(checks=checks, kept=kept, left_out=left_out)
