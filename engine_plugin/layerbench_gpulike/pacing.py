"""The GPU-like step's arithmetic and pacing, in plain Python (no torch, no vLLM), so it is tested on its own.

Each step is paced to its deadline: the step's window opens where the last one was due to end, and the forward
sleeps until the window has lasted the configured time. So vLLM's own work between two back-to-back forwards
(sampling, output processing, preparing the next batch: 2-5 ms per step on a 2-core host) falls inside the step,
as the CPU work of a GPU host overlaps its GPU's, and a sleep that woke late is made up by the next one instead of
adding to every step. An earlier pacer took running medians of that work and of the sleep's lateness out of each
sleep; whatever the medians missed came after the step (the client read the gpu-like profile's step 1.6% long at
c=64 on a 2-core host, 0.5% with deadlines: make calibrate, 2026-12-07).

A gap between forwards much longer than vLLM's usual work there is idle time (no request to run), not work: after
it the window opens that usual work before the forward, so a request arriving at an idle engine still waits its
whole first step. A gap as long as the step itself counts as the whole step: when vLLM's own work no longer fits,
the pacer stops sleeping instead of adding to it. A step whose real work already exceeds its configured time is
an overrun: it is not shortened, the next window opens where it really ended (nothing is made up from it), and it
is counted and logged (the harness tells such a level from the engine's own histograms)."""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("layerbench_gpulike")

LOG_EVERY_S = 30.0
WINDOW = 15  # steps in the running medians
# a gap between forwards longer than this many times vLLM's usual work there, plus the slack, is idle time
IDLE_FACTOR = 3.0
IDLE_SLACK_S = 0.002


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


def split_lengths(query_lens: Sequence[int]) -> tuple[int, int]:
    """(decoding sequences, prompt tokens) of a batch from each request's tokens in it: a request with one token
    is decoding, a longer one is prefilling its prompt (or a chunk of it)."""
    decode = sum(1 for n in query_lens if n == 1)
    return decode, sum(n for n in query_lens if n > 1)


def split_positions(positions: Sequence[int]) -> tuple[int, int]:
    """The same from token positions alone, where the batch's request boundaries are not at hand: a request's
    tokens sit together with consecutive positions. (Two decoding requests whose positions happen to follow each
    other read as a 2-token prompt chunk.)"""
    lens: list[int] = []
    prev: int | None = None
    for p in positions:
        if prev is not None and p == prev + 1:
            lens[-1] += 1
        else:
            lens.append(1)
        prev = p
    return split_lengths(lens)


@dataclass
class Pacer:
    """Sleeps each step until its deadline: the configured time after the last step's deadline while vLLM is busy,
    after its usual work before this forward when it was idle."""

    step: StepTime
    clock: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep
    gaps: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # vLLM's work between forwards (s)
    overshoots: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # sleeps' lateness (s)
    prev_end: float | None = None  # when the last forward returned
    due: float | None = None  # when the last step's window closed: its deadline, or its real end if it overran
    stats: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("steps", "overruns", "configured_ms", "slept_ms"), 0.0))
    last_log: float = field(default_factory=time.monotonic)

    @staticmethod
    def _median(xs: deque) -> float:
        return statistics.median(xs) if xs else 0.0

    def _opened(self, started: float, target: float) -> float:
        """Where this step's window opens: the last deadline, unless the gap since the last forward was idle."""
        if self.prev_end is None or self.due is None:
            return started
        gap = started - self.prev_end
        self.gaps.append(min(gap, target))
        usual = self._median(self.gaps)
        if gap <= IDLE_FACTOR * usual + IDLE_SLACK_S:
            return self.due
        return started - usual

    def finish(self, started: float, decode: int, prefill: int) -> float:
        """Called when forward's compute is done (started: its clock() at entry); returns the seconds slept."""
        target = self.step.ms(decode, prefill) / 1e3
        due = self._opened(started, target) + target
        rest = due - self.clock() - self._median(self.overshoots)
        if rest > 0:
            t0 = self.clock()
            self.sleep(rest)
            self.overshoots.append(max(self.clock() - t0 - rest, 0.0))
            self.due = due
        else:
            self.stats["overruns"] += 1
            self.due = self.clock()
        self.prev_end = self.clock()
        s = self.stats
        s["steps"] += 1
        s["configured_ms"] += target * 1e3
        s["slept_ms"] += max(rest, 0.0) * 1e3
        if (now := time.monotonic()) - self.last_log >= LOG_EVERY_S:
            self.last_log = now
            n = max(s["steps"], 1.0)
            log.info("layerbench gpu-like step: %d steps, configured %.2f ms and slept %.2f ms per step on "
                     "average; %d overran their configured time", s["steps"], s["configured_ms"] / n,
                     s["slept_ms"] / n, s["overruns"])
        return max(rest, 0.0)
