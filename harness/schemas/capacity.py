"""The SLA, one probed level, and what a capacity search concluded."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SLA(BaseModel):
    """Bounds on a level's p95s, in seconds like the profile's `slo`; None: not bounded."""

    ttft_p95_s: float = Field(gt=0)
    itl_p95_s: float | None = Field(None, gt=0)

    def text(self) -> str:
        itl = f"ITL p95 ≤ {self.itl_p95_s * 1e3:g} ms" if self.itl_p95_s else "ITL p95 not bounded"
        return f"TTFT p95 ≤ {self.ttft_p95_s * 1e3:g} ms, {itl}"


class Probe(BaseModel):
    """One measured level of the search."""

    level: float
    phase: Literal["coarse", "bisect"]
    held: bool
    why: list[str] = []  # which bound it broke, with the figures
    ttft_p95_ms: float | None
    itl_p95_ms: float | None
    tok_s: float
    goodput: float
    error_share: float
    waiting_max: float | None
    running_max: float | None
    kv_cache_usage_max: float | None
    on_gpu: bool = False  # measured on a GPU host: the CPU-host reading of a slow step does not apply
    client_bound: bool = False  # the load client ran out of CPU here: the level measured the client, not the engine


class CapacityResult(BaseModel):
    label: str
    stack: str
    kind: Literal["concurrency", "rate"]
    sla: SLA
    max_concurrency: int | None = None  # closed loop: the capacity (0: no level held)
    max_rate: float | None = None  # open loop: the highest offered req/s that held
    reached: bool = True  # False: every level held up to the search's ceiling; capacity is at least that
    broke_at: float | None = None
    how: Literal["queueing", "prefill interference", "slow first token", "errors", "none"] = "none"
    how_text: str = ""
    waiting_before_break: float | None = None  # 429-threshold candidates, at the last level that held
    kv_usage_before_break: float | None = None
    running_before_break: float | None = None
    tok_s_at_capacity: float | None = None
    probes: list[Probe] = []
    message: str = ""
    warnings: list[str] = []  # where the search's answer is fragile: latency not rising with load, thin margins

    @property
    def value(self) -> float:
        return float((self.max_concurrency if self.kind == "concurrency" else self.max_rate) or 0.0)


class CapacitySummary(BaseModel):
    """summary.json of `make capacity`: the stack's capacity and, with BASELINE=1, its baseline's."""

    run_id: str
    stack: str
    shape: str | None = None  # which form of the stack (Stack.shape()), as a compare names it
    profile: str
    status: str = "running"
    sla: SLA
    scrape_policy: str  # how the measured windows were scraped
    gauges_polled_apart: bool = False  # the gauges came from a separate polled pass at each level
    capacity: CapacityResult | None = None
    baseline: CapacityResult | None = None
    lost_to_layer_pct: float | None = None  # 100 * (1 - stack / baseline)
    failures: dict[str, str] = {}
    wall_s: float | None = None
    versions: dict[str, str] = {}

    def finish(self) -> None:
        b, s = self.baseline, self.capacity
        if b and s and b.value > 0 and b.reached:
            self.lost_to_layer_pct = 100.0 * (1.0 - s.value / b.value)
