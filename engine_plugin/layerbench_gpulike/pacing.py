"""The GPU-like step's arithmetic and pacing, in plain Python (no torch, no vLLM), so it is tested on its own.

The step is paced from one forward's start to the next, not only over forward(): the time vLLM spends between two
back-to-back forwards (sampling, output processing, preparing the next batch: 2–5 ms per step on a 2-core host)
is work a GPU host does on its CPU too, so it is taken out of the sleep. A step whose real work already exceeds
its configured time is an overrun: it is not shortened, it is counted and logged (the harness tells such a level
from the engine's own histograms)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("layerbench_gpulike")

LOG_EVERY_S = 30.0
SMOOTHING = 0.2  # weight of the newest gap in the running estimate of vLLM's work between two forwards


@dataclass(frozen=True)
class StepTime:
    base_ms: float
    decode_ms_per_token: float
    prefill_ms_per_token: float

    def ms(self, decode: int, prefill: int) -> float:
        return self.base_ms + self.decode_ms_per_token * decode + self.prefill_ms_per_token * prefill

    @classmethod
    def from_config(cls, cfg: object) -> StepTime:
        """From the model's config.json (`layerbench_step`, written by layerbench with the profile's step)."""
        raw = getattr(cfg, "layerbench_step", None)
        if not isinstance(raw, dict):
            raise ValueError("the GPU-like model's config.json has no layerbench_step: it is written by layerbench "
                             "from the profile's engine.step")
        return cls(float(raw["base_ms"]), float(raw["decode_ms_per_token"]), float(raw["prefill_ms_per_token"]))


def split_tokens(positions: Sequence[int]) -> tuple[int, int]:
    """(decode tokens, prefill tokens) of a flattened batch. A sequence's tokens sit together with consecutive
    positions, so a run of length 1 is one decoding sequence and longer runs are prompt chunks. (Two decoding
    sequences whose positions happen to follow each other read as a 2-token chunk: a rare, small error.)"""
    decode = prefill = 0
    run = 0
    prev: int | None = None
    for p in positions:
        if prev is not None and p == prev + 1:
            run += 1
        else:
            decode, prefill = (decode + 1, prefill) if run == 1 else (decode, prefill + run)
            run = 1
        prev = p
    decode, prefill = (decode + 1, prefill) if run == 1 else (decode, prefill + run)
    return decode, prefill


@dataclass
class Pacer:
    """Sleeps each step up to its configured time, from the start of one forward to the start of the next."""

    step: StepTime
    clock: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep
    outside_s: float = 0.0  # running estimate of vLLM's own work between back-to-back forwards
    prev_end: float | None = None
    stats: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("steps", "overruns", "configured_ms", "slept_ms"), 0.0))
    last_log: float = field(default_factory=time.monotonic)

    def finish(self, started: float, decode: int, prefill: int) -> float:
        """Called when forward's compute is done (started: its clock() at entry); returns the seconds slept."""
        target = self.step.ms(decode, prefill) / 1e3
        if self.prev_end is not None and (gap := started - self.prev_end) < target:  # came straight back
            self.outside_s = gap if self.stats["steps"] < 2 else (1 - SMOOTHING) * self.outside_s + SMOOTHING * gap
        rest = target - (self.clock() - started) - self.outside_s
        if rest > 0:
            self.sleep(rest)
        else:
            self.stats["overruns"] += 1
        self.prev_end = self.clock()
        s = self.stats
        s["steps"] += 1
        s["configured_ms"] += target * 1e3
        s["slept_ms"] += max(rest, 0.0) * 1e3
        if (now := time.monotonic()) - self.last_log >= LOG_EVERY_S:
            self.last_log = now
            n = max(s["steps"], 1.0)
            log.warning("layerbench gpu-like step: %d steps, configured %.2f ms and slept %.2f ms per step on "
                        "average; %d overran their configured time", s["steps"], s["configured_ms"] / n,
                        s["slept_ms"] / n, s["overruns"])
        return max(rest, 0.0)
