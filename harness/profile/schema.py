"""Load profiles: what load to send (levels, request counts, token lengths, SLOs) and the engine settings
both deployments of a compare must share. Built-in profiles live in harness/profiles/*.yaml.

A profile is closed-loop (levels are `concurrency`: exactly c requests in flight) unless it sets `rates`: then
it is open-loop, its levels are offered request rates (req/s) and requests are sent on a schedule of `arrival`
gaps (harness/load/openloop.py) whatever the server does."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from harness.errors import LayerbenchError
from harness.profile.engine import SLO, EngineSettings
from harness.profile.traces import Trace, load_trace
from harness.profile.workload import (
    STRICT,
    Length,
    PrefixGroups,
    Sessions,
    TraceReplay,
    Uniform,
    bounds,
    describe,
)

PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles"
# requests per half of a window's stationarity check (harness.analysis.steady): fewer say nothing of a median
MIN_HALF = 10

IDLE_CORES = 0.02  # interleaved compare: the idle side's CPU during a window above which it is measured again
CLIENT_PROCS_MAX = 16  # load client processes per side, at most
SHARED_GPU_MEMORY = 0.45  # interleaved compare on shared GPUs: each side's gpu_memory_utilization at most


def min_requests() -> int:
    """The fewest requests a level may send: two halves the stationarity check can compare."""
    return 2 * MIN_HALF

class LoadProfile(BaseModel):
    model_config = STRICT

    name: str
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    requests: int = Field(100, gt=0, description="minimum measured requests per level")
    requests_per_concurrency: int = Field(
        8, ge=0, description="a level sends at least this many requests per concurrent slot"
    )
    min_duration_s: float = Field(0.0, ge=0, description="a level keeps sending until this long has passed")
    warmup_waves: int = Field(1, ge=0)
    input_tokens: Length = Field(128, description="prompt tokens: a number above 16 (the unique prefix takes 16), "
                                 "{uniform: [lo, hi]}, {lognormal: {mean, sigma, max}}, or dataset (its prompts)")
    output_tokens: Length = Field(64, description="max_tokens of each request (ignore_eos makes it the output): a "
                                  "number above 1, uniform, lognormal, or dataset (the dataset's answers' lengths)")
    dataset: str | None = Field(None, min_length=1, description="a ShareGPT JSON file or a JSONL of {prompt, "
                                "output_tokens}: the requests' prompts, sampled by the run's seed")
    prefix: PrefixGroups | None = Field(None, description="shared-prefix groups: {groups: G, shared_tokens: P}; "
                                        "default: every prompt begins with a block of its own")
    sessions: Sessions | None = Field(None, description="multi-turn chats {turns: T, think_time_s: X, rate: R}, each "
                                      "turn sending the conversation so far: a level's concurrency counts chats in "
                                      "flight, or with `rate` chats start at R a second (open loop, level R x T)")
    trace: TraceReplay | None = Field(None, description="a production trace replayed on its own arrival times as "
                                      "one open-loop level (or one per segment): {path, format, time_scale, "
                                      "start_s, duration_s, max_requests, jitter, arrivals, block_tokens, sessions, "
                                      "segments}")
    api: Literal["completions", "chat"] = "completions"
    ignore_eos: bool = True
    request_timeout_s: float = Field(120.0, gt=0)
    scrape: Literal["boundary", "interval", "none"] = Field(
        "boundary", description="boundary: every metric endpoint is read just before and just after each measured "
        "window, never during it (the default: a 2 s poll of vLLM's /metrics moved its TTFT p50 5x on a 2-core "
        "host); interval: also every scrape_interval_s during the window (seed 000's time series of waiting "
        "requests and KV-cache usage; its cost lands in the measured figures); none: no scraping")
    scrape_interval_s: float = Field(2.0, gt=0)
    warmup_sweep: bool | None = Field(
        None, description="one unmeasured wave at every level before the first measured level, so a compiled "
        "engine has seen every batch shape; default: on unless engine.enforce_eager")
    client_nice: int = Field(-5, ge=-20, le=19, description="scheduling priority of the load client and scraper; "
                             "the deployment keeps the priority layerbench was started with")
    client_cpus: int = Field(1, ge=0, description="cores reserved for the load client and scraper, the deployment "
                             "gets the rest; applied only on hosts with at least client_cpus + 2 cores")
    client_procs: int | Literal["auto"] = Field(
        "auto", description="load client processes per side, a level's slots (or rate) split between them; auto: "
        "per level, as many as keep each under half a core at the events per second expected there, within the "
        "cores reserved for the client (client_cpus); 1 on a host with no core reserved for it")
    pairs: int = Field(2, ge=1, le=64, description="compare: deployment pairs (a baseline and a stack each), run in "
                       "counterbalanced order (AB, BA, BA, AB, ...); the deployment is the unit of replication, "
                       "since on a shared host a whole deployment runs faster or slower than the next")
    stopping: Literal["sequential", "fixed"] = Field(
        "sequential", description="compare: sequential: pairs are added until every judged level and endpoint is "
        "decided (overhead, gain, or equivalent within the margin), or `max_pairs` or `budget_min` is reached, each "
        "look at a group-sequential boundary (harness.analysis.sequential); fixed: exactly `pairs` pairs. A profile "
        "that sets `pairs` and not `stopping` is fixed, as before")
    max_pairs: int = Field(8, ge=2, le=64, description="compare, sequential: the most deployment pairs")
    budget_min: float | None = Field(None, gt=0, description="compare, sequential: wall minutes the compare may "
                                     "take, deployments' starts included; a pair that would end past it is not "
                                     "started (none: only `max_pairs` limits it)")
    target_mde: float = Field(0.03, gt=0, lt=1, description="compare: the throughput effect (a share) the plan "
                              "sizes the compare to detect at every level, with 80% power at 5%")
    deployments: Literal["sequential", "interleaved"] = Field(  # interleaved: harness.measure.interleave
        "sequential", description="compare: sequential: one deployment up at a time, each sweeping every level; "
        "interleaved: a pair's baseline and stack up at once, their windows in random order at each level, a "
        f"window measured again when the idle side used more than {IDLE_CORES} cores (only where both fit: the "
        f"GPU-like engine, a host without GPUs, or gpu_memory_utilization <= {SHARED_GPU_MEMORY} on shared GPUs)")
    repeats: int = Field(1, ge=1, description="measured sweeps per deployment")
    server_placement: Literal["os", "fixed"] = Field(
        "os", description="os: the deployment's threads run where the OS puts them; fixed: once it is ready, every "
        "thread not bound to one core (vLLM's CPU worker binds its own) is pinned to the cores left free, so the "
        "API server and a layer never share the worker's core")
    equivalence_margin: float = Field(0.05, gt=0, lt=1, description="compare: a level is `equivalent` when its "
                                      "90% interval lies inside ±this share (throughput and TTFT p95) or "
                                      "±this many points of goodput")
    ttft_margin: float | None = Field(None, gt=0, lt=1, description="compare: TTFT p95's equivalence margin, a "
                                      "share (default: equivalence_margin)")
    slo: SLO = Field(default_factory=SLO)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    rates: list[float] | None = Field(
        None, description="open loop: offered request rates (req/s); when set, the profile's levels are these "
        "rates and `concurrency` is not used")
    arrival: Literal["poisson", "constant"] = Field(
        "poisson", description="open loop: inter-arrival gaps, exponential (poisson) or 1/rate (constant)")
    seed: int | None = Field(None, description="every drawn thing: prompt text and prefixes, drawn lengths, dataset "
                             "picks, the poisson schedule; two runs with one seed send byte-identical requests "
                             "(default: from the run id, so a run, its resume and both sides of a compare send the "
                             "same ones, and two runs different ones)")

    @model_validator(mode="before")
    @classmethod
    def _fixed_when_pairs_given(cls, data):
        """A profile written before sequential stopping names its `pairs`: it keeps that fixed design."""
        if isinstance(data, dict) and "pairs" in data and "stopping" not in data:
            data = {**data, "stopping": "fixed"}
        return data

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v):
            raise ValueError("concurrency levels must be positive integers")
        return sorted(set(v))

    @field_validator("input_tokens", "output_tokens")
    @classmethod
    def _length(cls, v: Length, info) -> Length:
        """A prompt holds its unique 16-token prefix and more; an output has 2 tokens for a TPOT. A lognormal draw
        below that is raised to it (harness.profile.workload.draw); a fixed or uniform length is refused."""
        least = 17 if info.field_name == "input_tokens" else 2
        if isinstance(v, int | Uniform) and (b := bounds(v)) is not None and b[0] < least:
            raise ValueError(f"{info.field_name} {describe(v)} goes below {least} tokens")
        return v

    @field_validator("client_procs")
    @classmethod
    def _procs(cls, v: int | str) -> int | str:
        if v != "auto" and not 1 <= int(v) <= CLIENT_PROCS_MAX:
            raise ValueError(f"client_procs is a number of processes from 1 to {CLIENT_PROCS_MAX}, or auto")
        return v

    @field_validator("rates")
    @classmethod
    def _rates(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (not v or any(r <= 0 for r in v)):
            raise ValueError("rates must be a non-empty list of positive request rates (req/s)")
        return None if v is None else sorted({float(r) for r in v})

    @model_validator(mode="after")
    def _long_enough(self) -> LoadProfile:
        """Every level must hold a stationarity split, and under `interval` scraping at least one scrape; open-loop
        fields only with `rates`. By value, not by which fields were given: a recorded profile (run.json, a
        target's profile.yaml) holds every field, defaults included."""
        if self.rates is not None and self.concurrency != type(self).model_fields["concurrency"].get_default(
                call_default_factory=True):
            raise ValueError("set either `concurrency` (closed loop: requests in flight) or `rates` (open loop: "
                             "requests per second), not both")
        if self.chats_open and self.concurrency != type(self).model_fields["concurrency"].get_default(
                call_default_factory=True):
            raise ValueError("set either `concurrency` (closed loop: chats in flight) or `sessions.rate` (open loop: "
                             "chats started per second), not both")
        if self.rates is None and not self.chats_open and self.arrival != "poisson":
            raise ValueError("`arrival` applies to open-loop profiles only: set `rates` (req/s) or `sessions.rate` "
                             "(chats/s) too, or remove it")

        self._workload_fits()
        short = [x for x in self.levels() if self.requests_for(x) < min_requests()]
        if short:
            fix = "widen the trace's window (start_s, duration_s, max_requests)" + (
                ", or cut it in fewer segments" if self.trace.segments > 1 else "") if self.trace else \
                "raise `requests` or " + ("`min_duration_s`" if self.open_loop else "`requests_per_concurrency`")
            raise ValueError(f"levels {short} send fewer than {min_requests()} requests, too few to check that the "
                             f"level is steady (two halves of >= 10): {fix}")
        if self.scrape == "interval" and self.min_duration_s < self.scrape_interval_s:
            raise ValueError(f"with scrape: interval a level must hold one scrape: set `min_duration_s` "
                             f"({self.min_duration_s}) >= `scrape_interval_s` ({self.scrape_interval_s})")
        return self

    def _workload_fits(self) -> None:
        """A dataset with its lengths, a shared prefix inside every prompt, and the longest request inside
        max_model_len."""
        if self.trace is not None:  # its lengths are the trace's, fitted to max_model_len as it is read
            default = type(self).model_fields["concurrency"].get_default(call_default_factory=True)
            if self.rates is not None or self.dataset or self.prefix or self.sessions or self.concurrency != default:
                raise ValueError("a trace sets its own arrivals, lengths and prefixes: remove `concurrency`, `rates`, "
                                 "`dataset`, `prefix` and `sessions` from a profile with `trace`")
            if self.trace.sessions and not any(r.chat is not None for r in self.replay().requests):
                raise ValueError(f"trace.sessions: {self.trace.path} names no chat in the window replayed (bailian's "
                                 "chat_id, jsonl's `session`)")
            return
        uses = "dataset" in (self.input_tokens, self.output_tokens)
        if uses and self.dataset is None:
            raise ValueError("input_tokens or output_tokens `dataset` needs `dataset: PATH` (a ShareGPT JSON or JSONL "
                             "file)")
        if self.dataset is not None and self.input_tokens != "dataset":
            raise ValueError("with `dataset` the prompts are the dataset's own text: set input_tokens: dataset")
        ins, outs = bounds(self.input_tokens), bounds(self.output_tokens)
        if self.prefix is not None and isinstance(self.input_tokens, int | Uniform) and ins is not None \
                and ins[0] < self.prefix.shared_tokens + 17:  # a lognormal draw is raised to what it needs
            raise ValueError(f"prefix shared_tokens {self.prefix.shared_tokens} leaves no room for the unique part "
                             f"in a prompt of {ins[0]} tokens: input_tokens must be at least shared_tokens + 17")
        turns = self.sessions.turns if self.sessions else 1
        if ins is not None and outs is not None and turns * (ins[1] + outs[1]) > self.engine.max_model_len:
            what = f"{turns} turns of " if turns > 1 else ""
            raise ValueError(f"a request of up to {what}{ins[1]} + {outs[1]} tokens is beyond engine.max_model_len "
                             f"{self.engine.max_model_len}: raise max_model_len or shorten the lengths")
        if self.sessions is not None and self.rates is not None:
            raise ValueError("with `sessions`, an open loop's rate is the chats': set `sessions.rate` (chats started "
                             "per second; a level is the request rate they offer, rate x turns), not `rates`")

    def shape_text(self) -> str:
        """The request shape as a report names it: `128/64`, or its distributions."""
        if self.trace is not None:
            scale = f" at {self.trace.time_scale:g}x" if self.trace.time_scale != 1 else ""
            even = ", evenly spaced" if self.trace.arrivals == "even" else ""
            return f"the {self.trace.format} trace {Path(self.trace.path).name}{scale}{even}"
        text = f"{describe(self.input_tokens)}/{describe(self.output_tokens)}"
        if self.dataset:
            text += f" from {Path(self.dataset).name}"
        if self.prefix:
            text += f", {self.prefix.groups} groups sharing {self.prefix.shared_tokens} prefix tokens"
        if self.sessions:
            text += f", chats of {self.sessions.turns} turns ({self.sessions.think_time_s:g} s to think)"
            if self.sessions.rate:
                text += f" starting at {', '.join(f'{r:g}' for r in self.sessions.rate)} a second"
        return text

    def builtin_shaped(self) -> bool:
        """Whether its requests have the shape of the built-in profile of its name (a study's published figures
        are set beside a run only at the study's shape)."""
        path = PROFILE_DIR / f"{self.name}.yaml"
        if not path.exists():
            return False
        from harness.profile.loading import load_profile  # it builds this class

        ref = load_profile(str(path))
        fields = ("input_tokens", "output_tokens", "dataset", "prefix", "api")
        return all(getattr(self, f) == getattr(ref, f) for f in fields)

    def warms_every_level(self) -> bool:
        return self.warmup_sweep if self.warmup_sweep is not None else not self.engine.enforce_eager

    def requests_for(self, level: float) -> int:
        """Window size. Closed loop: short windows at high concurrency are all ramp and tail (see DESIGN, window
        size). Open loop: at least `requests`, and at least rate x `min_duration_s` (the schedule's length)."""
        if self.trace is not None:  # the replay: every request of its window (or of the segment)
            return len(self.segment(level))
        if self.open_loop:
            n = max(self.requests, math.ceil(level * self.min_duration_s))
            turns = self.sessions.turns if self.chats_open and self.sessions else 1
            return -(-n // turns) * turns  # whole chats
        return max(self.requests, self.requests_per_concurrency * int(level))

    @property
    def open_loop(self) -> bool:
        """Levels are offered request rates (`rates`, a trace's, or what chats started at `sessions.rate` offer),
        not concurrencies."""
        return self.rates is not None or self.trace is not None or self.chats_open

    @property
    def chats_open(self) -> bool:
        """Chats start on a schedule (`sessions.rate`) rather than one per closed-loop slot."""
        return self.sessions is not None and self.sessions.rate is not None

    def levels(self) -> list[float] | list[int]:
        """The levels to measure: rates (req/s) in an open-loop profile (a trace's: its mean rate, or each
        segment's in the trace's order), concurrencies otherwise."""
        if self.trace is not None:
            return list(self._segments())
        if self.sessions is not None and self.sessions.rate is not None:
            return self.sessions.levels()
        return list(self.rates) if self.rates is not None else list(self.concurrency)

    def _segments(self) -> dict[float, list[int]]:
        """level -> its requests: the whole replay at its mean rate, or each of `segments` stretches at its own
        (to 0.01 req/s; a stretch of the same rate as an earlier one is told apart by 0.01), in the trace's order."""
        assert self.trace is not None
        t = self.replay()
        if self.trace.segments == 1:
            return {round(t.mean_rate(), 2): list(range(len(t.requests)))}
        out: dict[float, list[int]] = {}
        for rate, part in t.segments(self.trace.segments):
            level = round(rate, 2)
            while level in out or level <= 0:
                level = round(level + 0.01, 2)
            out[level] = part
        return out

    def segment(self, level: float) -> list[int]:
        """A trace level's requests (positions in the replay); [] for a level that is not one of its own."""
        return self._segments().get(round(float(level), 2), [])

    def replay(self) -> Trace:
        """The trace as replayed: read once per process and file."""
        assert self.trace is not None
        return load_trace(self.trace, self.engine.max_model_len)

    def with_levels(self, levels: Sequence[float]) -> LoadProfile:
        """A validated copy measuring `levels` instead (rates in an open-loop profile, concurrencies otherwise);
        raises LayerbenchError naming the problem."""
        if self.trace is not None:
            raise LayerbenchError(f"profile {self.name!r} replays a trace, its levels the trace's own rates: they "
                                  "cannot be changed (time_scale changes them, segments cuts the replay in more)")
        data = self.model_dump()
        if self.sessions is not None and self.sessions.rate is not None:  # a level is rate x turns
            data["sessions"]["rate"] = [x / self.sessions.turns for x in levels]
        else:
            data["rates" if self.open_loop else "concurrency"] = list(levels)
        try:
            return LoadProfile.model_validate(data)
        except ValidationError as e:
            raise LayerbenchError(f"levels {list(levels)} for profile {self.name!r}: {problems(e)}") from None


def problems(e: ValidationError) -> str:
    return "; ".join((f"field '{'.'.join(str(x) for x in err['loc'])}': " if err["loc"] else "")
                     + err["msg"].removeprefix("Value error, ") for err in e.errors())
