"""One measured window and one side's run: a level's statistics, the client's health, the server's figures,
where the processes ran, the GPU-like calibration, and the run summary they make up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel

from harness.schemas.deploy import AppliedConfig
from harness.schemas.profiles import ProfiledLevel

TOLERANCE = 0.10  # how far a measured emulated step may be off the configured one and still be held

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


class Leveled(BaseModel):
    """A load level: a concurrency (closed loop), or an offered request rate (open loop; concurrency 0)."""

    concurrency: int
    rate: float | None = None  # open loop: the offered request rate (req/s); None in closed loop

    @property
    def level(self) -> float | int:
        """The level's key: its offered rate in an open loop, its concurrency otherwise."""
        return self.rate if self.rate is not None else self.concurrency

    @property
    def level_text(self) -> str:
        return level_text(self.level, self.rate is not None)


class Modes(BaseModel):
    """Two TTFT modes, when the data has them."""

    slow_share: float
    threshold_ms: float
    fast_p50_ms: float
    slow_p50_ms: float
    streaks: int
    mean_streak: float
    longest_streak: int
    independent_streak: float  # mean streak length if slow requests came independently: 1 / (1 - share)

    def text(self) -> str:
        return (f"bimodal TTFT: {100 * self.slow_share:.0f}% slow (p50 {self.slow_p50_ms:.0f} vs "
                f"{self.fast_p50_ms:.0f} ms), in streaks of {self.mean_streak:.1f} (longest {self.longest_streak}; "
                f"{self.independent_streak:.1f} if independent)")


class Stationarity(BaseModel):
    steady: bool | None  # None: window too short to split
    tok_s_halves: tuple[float, float] | None = None
    tok_s_noise: float | None = None  # 95% half-width of the difference, tok/s
    ttft_p50_halves: tuple[float, float] | None = None
    ttft_noise_ms: float | None = None
    blocks_tok_s: list[float] = []  # tok/s per time block of the full-load period
    first_wave_ttft_p50_ms: float | None = None  # the window's first c requests (they start together)
    rest_ttft_p50_ms: float | None = None
    tpot_p50_halves: tuple[float, float] | None = None  # the engine's per-token time, halves by start order
    reasons: list[str] = []


class LevelStats(Leveled):
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
    tokens_per_arrival: float | None = None  # per read that carried content events (several events in one read: one)
    arrival_gap_ms: Dist = Dist()  # between a request's reads that carried content: a batching layer's interval
    dispatch_delay_ms: Dist
    steady: Stationarity = Stationarity(steady=None)
    ttft_modes: Modes | None = None
    scheduled_rate: float | None = None  # open loop: the rate of the schedule as drawn (poisson: ~rate)
    achieved_rate: float | None = None  # open loop: the rate the client actually sent at
    off_schedule: str | None = None  # open loop: why the client did not keep to the schedule (None: it did)
    # closed loop: output tok/s over the window's steady part (steady_window), the rate a compare judges
    steady_tok_s: float | None = None
    steady_s: float | None = None  # how long that part lasted

    @property
    def judged_tok_s(self) -> float:
        """The rate a compare's verdict uses: the steady part's where the window had one, else the window's."""
        return self.steady_tok_s if self.steady_tok_s is not None else self.throughput_tok_s


def level_text(level: float | int, open_loop: bool) -> str:
    """`c=4` or `8 req/s`: how a level is named in tables and sentences."""
    return f"{level:g} req/s" if open_loop else f"c={level:g}"  # a concurrency read back as 16.0 is c=16


def levels_text(levels: Sequence[float | int], open_loop: bool) -> str:
    """A list of levels: `c=[1, 4]` (closed loop) or `2, 8 req/s` (open loop)."""
    return f"{', '.join(f'{x:g}' for x in levels)} req/s" if open_loop else f"c={list(levels)}"


class ClientHealth(BaseModel):
    cpu_pct: float  # of one core, whole client process (event loop; the scraper is its own process)
    loop_lag_ms: Dist
    dispatch_delay_ms: Dist
    saturated: bool = False  # the client is out of CPU: figures are the client's as much as the server's
    starved: bool = False  # the deployment holds the cores: timestamps late by up to the loop lag
    reasons: list[str] = []


class ReplicaLoad(BaseModel):
    """One engine's share of a level where a side has several (engine.replicas), from its own counters between
    the window's edges (harness.analysis.replicas)."""

    replica: str  # its metric endpoint: engine@0, api@1, ...
    requests: float | None = None
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    in_engine: float | None = None  # mean requests in the engine over the window, running and waiting
    waiting: float | None = None  # mean requests waiting in it


class ServerLevelMetrics(BaseModel):
    scrapes: int = 0
    gaps: int = 0
    gap_reasons: dict[str, int] = {}
    running_max: float | None = None
    waiting_max: float | None = None
    kv_cache_usage_max: float | None = None
    preemptions: float | None = None  # counter deltas over the level
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    layer: dict[str, float] = {}  # LayerMetric.key -> value over the level
    # the engine's own view of the measured window, from its histograms' _sum/_count deltas between the window's
    # edge scrapes: mean TTFT and E2E in ms, and how many requests they count (None: the layer hides them)
    engine_ttft_ms: float | None = None
    engine_e2e_ms: float | None = None
    engine_requests: float | None = None
    engine_itl_ms: float | None = None  # mean time between a request's tokens: the engine's step while decoding
    engine_steps: float | None = None  # engine steps in the window (vllm:iteration_tokens_total's count)
    engine_step_tokens: float | None = None  # tokens they computed, prompt and decode (its sum)
    replicas: list[ReplicaLoad] = []  # each engine's share, where the side has several


class LayerMetric(BaseModel):
    """One figure of the layer's own metrics, summarised per level: a gauge's peak (from scrapes during the
    window: `scrape: interval`), a counter's delta, or a counter's delta per request (the delta of `per`)."""

    key: str  # the report's column
    family: str
    how: Literal["peak", "delta", "per"] = "delta"
    per: str | None = None  # with how="per": the counter that counts what the delta is divided by
    note: str = ""  # what a reader must know about it
    # only the family's series whose labels contain each of these (Ray's `deployment=LLMServer`, `completions}`:
    # the scraper writes labels as `k=v`, sorted, in braces)
    match: tuple[str, ...] = ()
    # a wait per request in a queue of the layer: the factor from the figure to ms (Triton's µs: 0.001); the
    # diagnosis's queueing rule reads those that grow with the level
    queue_ms: float | None = None
    # a span of each request, timed by the layer, that holds every span declared after it and the engine's own
    # E2E: the factor from the figure to ms; the report splits the time outside the engine between the spans
    span_ms: float | None = None


class GpuWindow(BaseModel):
    """One GPU over one level's measured window."""

    index: int
    samples: int
    util_pct_mean: float | None = None
    util_pct_max: float | None = None
    memory_used_mib_max: float | None = None
    power_w_mean: float | None = None
    sm_clock_mhz_mean: float | None = None
    sm_active_mean: float | None = None  # DCGM, share of time (0..1)
    tensor_active_mean: float | None = None


class ProcessCores(BaseModel):
    allowed: list[int]
    ran_on: dict[int, float]  # core -> share of the samples in which one of its threads ran there


class DtypeChoice(BaseModel):
    dtype: str  # bfloat16 | float32
    step_ms: dict[str, float]  # dtype -> the tiny model's decode step at batch 64, ms
    cpu_bf16: bool  # the CPU has avx512_bf16 or amx_bf16

    def text(self) -> str:
        times = ", ".join(f"{k} {v:.2f} ms" for k, v in self.step_ms.items())
        return (f"{self.dtype}, measured on this CPU (the tiny model's decode step at batch 64: {times}; "
                f"{'with' if self.cpu_bf16 else 'without'} bfloat16 instructions)")


class LevelHold(BaseModel):
    level: int
    measured_ms: float | None  # mean over the calibration's requests of each one's median gap between tokens
    configured_ms: float
    requests: int | None = None  # how many requests measured_ms is the mean of (None: stored before it was kept)

    @property
    def held(self) -> bool:
        return self.measured_ms is not None and self.measured_ms <= (1 + TOLERANCE) * self.configured_ms


class Calibration(BaseModel):
    checks: list[LevelHold]
    kept: list[int]
    left_out: dict[int, str] = {}  # level -> why

    def text(self) -> str:
        if not self.checks:
            return "no level's calibration was recorded"
        if not self.left_out:
            return f"this host held the emulated step within {TOLERANCE:.0%} at every level (c={self.kept})"
        return (f"left out c={sorted(self.left_out)}: " + "; ".join(f"c={k}: {v}" for k, v in
                                                                   sorted(self.left_out.items())))


class LevelSummary(BaseModel):
    stats: LevelStats
    client: ClientHealth
    process_cpu_s: dict[str, float]
    window_s: float
    server: ServerLevelMetrics
    incomplete: str | None = None  # why the level stopped before its end; its figures cover what was sent
    invocation: int = 0  # 0: the first `compare`, n: the n-th `--resume` of it
    sent: int | None = None  # requests the load loop started; each one is a line in requests.jsonl
    part_of: float | None = None  # one load pod's part of the side's level (harness/targets/k8s load_parallelism)
    gpu: list[GpuWindow] = []  # NVML (and DCGM) per GPU of the deployment over the window; [] without GPUs
    pair: int = 0  # a compare's deployment pair that measured it (0: the first)
    attempt: int = 0  # an interleaved compare's window measured again (the other deployment was busy): its try
    idle_cores: float | None = None  # interleaved compare: cores the other deployment of the pair used meanwhile
    workers: list[ClientHealth] = []  # client_procs > 1: each load process's health (0: the sweep's own)
    layer_headers: dict[str, Dist] = {}  # the layer's own timing per request, from its declared response headers


class RunSummary(BaseModel):
    run_id: str
    label: str  # "baseline" / "stack" in a compare, the stack name otherwise
    stack: str
    engine_version: str
    applied: AppliedConfig
    profile: str
    status: str = "running"
    levels: list[LevelSummary] = []
    scrapes: int = 0
    scrape_gaps: int = 0
    scrape_gap_reasons: dict[str, int] = {}  # "http 500", "timeout", "connection", "unparsable" -> count
    stopped: str | None = None  # where and why the sweep ended early (died, unreachable, interrupted)
    exposed_ports: list[str] = []  # listening sockets of the deployment beyond loopback
    scrape_policy: str = "interval"
    scrape_ms: Dist = Dist()  # how long the metric endpoints took to answer
    warmup_sweep: bool = False
    shared_prefix: bool = False  # the requests share prefixes on purpose (`prefix` groups, or `sessions`' chats)
    # levels by their key (LevelStats.level): concurrencies, or offered rates (req/s) in an open loop
    client_saturated_levels: list[int | float] = []
    client_starved_levels: list[int | float] = []
    not_steady_levels: list[int | float] = []
    off_schedule_levels: list[float] = []  # open loop: the client could not keep to the schedule (stats.off_schedule)
    cores: dict[str, ProcessCores] = {}  # process label -> allowed cores and where its threads ran
    engine_binding: list[str] = []  # the engine's thread binding, from its startup log
    sampler_cpu_pct: float | None = None  # the core sampler's own CPU, % of one core
    layer_notes: dict[str, str] = {}  # the stack's own per-level figures (LevelSummary.server.layer): what each is
    # the layer's nested spans of a request among them, outermost first: key -> the factor to ms (LayerMetric.span_ms)
    layer_spans: dict[str, float] = {}
    gpu_telemetry: str | None = None  # how the GPU figures were read (None: a host without GPUs)
    devices: list[int] = []  # the GPUs the deployment was given; [] on a host without GPUs
    tokenizer: str | None = None  # what counted prompt lengths: "<tokenizer.json> (whose)", or 4 characters a token
    calibration: Calibration | None = None  # gpu-like: the levels this host held the emulated step at
    profiled: list[ProfiledLevel] = []  # each level's profiled window (not judged), harness.measure.profiled
    profiled_s: float = 0.0  # wall seconds its profiled windows took, every deployment of the side together
    profile_note: str | None = None  # how it was profiled ("py-spy 0.4.3, 100 Hz, ..."), or why not
    remeasured: int = 0  # interleaved compare: windows measured again because the other side was not idle

    @property
    def open_loop(self) -> bool:
        return any(lv.stats.rate is not None for lv in self.levels)

    def drop_last(self) -> LevelSummary:
        """Take back the window just added (an interleaved compare measures it again); its flags go with it."""
        lv, kept = self.levels[-1], self.levels[:-1]
        self.levels = []
        for where in (self.client_saturated_levels, self.client_starved_levels, self.not_steady_levels,
                      self.off_schedule_levels):
            where.clear()
        for x in kept:
            self.add(x)
        return lv

    def add(self, lv: LevelSummary) -> None:
        """Append a measured level and note its troubles by level (concurrency, or rate in an open loop)."""
        self.levels.append(lv)
        c = lv.stats.level
        for flag, where in ((lv.client.saturated, self.client_saturated_levels),
                            (lv.client.starved, self.client_starved_levels),
                            (lv.stats.steady.steady is False, self.not_steady_levels),
                            (lv.stats.off_schedule is not None, self.off_schedule_levels)):
            if flag and c not in where:
                where.append(c)
