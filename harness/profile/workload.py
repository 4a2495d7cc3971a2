"""What a profile's requests look like: token lengths that are fixed or drawn from a distribution, prompts taken
from a dataset file, and groups of requests that share a prefix. The schemas live here; the requests themselves
are built by harness.load.requests.

Every draw is a pure function of (the run, the request's level, index and phase), never of the side or of time:
both sides of a compare, every repeat's replay and a resume send the same requests in the same order."""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

# strict: an int field takes only a YAML integer (lax mode read `concurrency: [true]` as c=1 and "100" as 100);
# float fields still take integers. No inf/nan: `.inf` for a duration would make a level run forever.
STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
LENGTH_MAX = 1_000_000  # tokens: a bound on any length, far above any model's context


class Uniform(BaseModel):
    """`{uniform: [lo, hi]}`: every length from lo to hi (inclusive) equally likely."""

    model_config = STRICT
    uniform: list[int]

    @field_validator("uniform")
    @classmethod
    def _bounds(cls, v: list[int]) -> list[int]:
        if len(v) != 2 or not 1 <= v[0] <= v[1] <= LENGTH_MAX:
            raise ValueError(f"uniform takes [lo, hi] with 1 <= lo <= hi <= {LENGTH_MAX:,}, got {v}")
        return v


class LognormalSpec(BaseModel):
    model_config = STRICT
    mean: float = Field(gt=0, le=LENGTH_MAX, description="the lengths' mean in tokens (before the cap)")
    sigma: float = Field(gt=0, le=3, description="the spread of log(length)")
    max: int = Field(gt=0, le=LENGTH_MAX, description="lengths above it are cut to it")

    @model_validator(mode="after")
    def _cap_above_mean(self) -> LognormalSpec:
        if self.max < self.mean:
            raise ValueError(f"lognormal max ({self.max}) is below its mean ({self.mean:g})")
        return self


class Lognormal(BaseModel):
    """`{lognormal: {mean, sigma, max}}`: long-tailed lengths as chat traffic has them, cut at max."""

    model_config = STRICT
    lognormal: LognormalSpec


def _form(v: object) -> str | None:
    """Which form a length is written in, so a mistake is reported against that form only."""
    if isinstance(v, dict | Uniform | Lognormal):
        keys = set(v) if isinstance(v, dict) else set(type(v).model_fields)
        return "uniform" if keys == {"uniform"} else "lognormal" if keys == {"lognormal"} else None
    return "dataset" if isinstance(v, str) else "tokens" if isinstance(v, int) and not isinstance(v, bool) else None


Length = Annotated[Annotated[int, Tag("tokens")] | Annotated[Uniform, Tag("uniform")]
                   | Annotated[Lognormal, Tag("lognormal")] | Annotated[Literal["dataset"], Tag("dataset")],
                   Discriminator(_form, custom_error_type="length", custom_error_message=(
                       "a length is a number of tokens, {uniform: [lo, hi]}, {lognormal: {mean, sigma, max}} or "
                       "dataset"))]


class PrefixGroups(BaseModel):
    """`prefix: {groups: G, shared_tokens: P}`: each request belongs to one of G groups (in a seeded order), and
    the requests of a group begin with the same P tokens, so a prefix cache has something to reuse."""

    model_config = STRICT
    groups: int = Field(ge=1, le=100_000)
    shared_tokens: int = Field(ge=1, le=LENGTH_MAX)


class Sessions(BaseModel):
    """`sessions: {turns: T, think_time_s: X, rate: R}`: chats of T turns, one after another; each turn's prompt is
    the conversation so far (every earlier prompt and answer) and a new user message of the profile's input
    length, sent X seconds after the last answer ended. Without `rate` each closed-loop slot holds one chat at a
    time (a level's concurrency counts chats in flight); with it, chats start at R per second (one rate or a list,
    the profile's `arrival` gaps) whatever the server does, and a level is the request rate they offer, R x T."""

    model_config = STRICT
    turns: int = Field(ge=2, le=100)
    think_time_s: float = Field(0.0, ge=0, le=600)
    rate: float | list[float] | None = Field(None, description="chats started per second (open loop)")

    @field_validator("rate")
    @classmethod
    def _rates(cls, v: float | list[float] | None) -> list[float] | None:
        rates = None if v is None else [v] if isinstance(v, int | float) else v
        if rates is not None and (not rates or any(r <= 0 for r in rates)):
            raise ValueError("sessions.rate is a positive number of chats started per second, or a list of them")
        return None if rates is None else sorted({float(r) for r in rates})

    def levels(self) -> list[float]:
        """The request rates its chat rates offer (R x T), the levels an open loop of chats is measured at."""
        return [round(r * self.turns, 6) for r in self.rate or []]


class TraceReplay(BaseModel):
    """`trace: {path, format, ...}`: a production trace replayed on its own arrival times, as one open-loop level
    or one per segment (harness.profile.traces reads it)."""

    model_config = STRICT
    path: str = Field(min_length=1, description="the trace file (read, never downloaded)")
    format: Literal["mooncake", "bailian", "burstgpt", "azure", "jsonl"] = Field(
        description="mooncake (JSONL, ms, 512-token hash_ids), bailian (JSONL, s, 16-token hash_ids), burstgpt "
        "(CSV), azure (CSV), jsonl (layerbench's: {t_ms, input_tokens, output_tokens, prefix_blocks?, session?})")
    time_scale: float = Field(1.0, gt=0, le=1000, description="speed-up: arrivals at the trace's time / time_scale")
    start_s: float = Field(0.0, ge=0, description="the window's start, seconds into the trace")
    duration_s: float | None = Field(None, gt=0, description="the window's length in the trace's seconds (default: "
                                     "to its end)")
    max_requests: int | None = Field(None, ge=1, description="at most this many of the window's requests")
    jitter: Literal["none", "spread"] = Field("none", description="spread: a coarse grid's ticks spread evenly")
    arrivals: Literal["trace", "even"] = Field("trace", description="trace: its own times; even: the same "
                                               "requests at the same mean rate, evenly spaced (the bursts taken out, "
                                               "to set a layer's cost under them beside its cost without)")
    block_tokens: int | None = Field(None, ge=1, le=4096, description="tokens per hash id block (default: the "
                                     "format's own, 512 for mooncake, 16 for bailian and jsonl)")
    segments: int = Field(1, ge=1, le=24, description="judge the replay in this many stretches of equal time, "
                          "each a level of its own (in the trace's order), so a layer's cost in the bursts is judged "
                          "apart from its cost between them")
    sessions: bool = Field(False, description="a chat's turn waits for the chat's previous answer: it goes out at "
                           "its own time, or when that answer ended where that is later (bailian's chat ids, "
                           "jsonl's `session`)")

    @model_validator(mode="after")
    def _blocks_where_carried(self) -> TraceReplay:
        if self.block_tokens is not None and self.format in ("burstgpt", "azure"):
            raise ValueError(f"{self.format} traces carry no hash ids: block_tokens does not apply to them")
        if self.sessions and self.format not in ("bailian", "jsonl"):
            raise ValueError(f"{self.format} traces carry no chat ids: sessions applies to bailian and jsonl traces")
        if self.sessions and self.arrivals == "even":
            raise ValueError("arrivals: even spaces requests by the clock alone; a chat's turn waiting for its "
                             "answer (sessions) would undo it: use one or the other")
        return self


def unit(*key: object) -> float:
    """A number in [0, 1) that depends only on `key`: the seeded draw behind every length and choice."""
    h = hashlib.blake2b("|".join(map(str, key)).encode(), digest_size=8).digest()
    return (int.from_bytes(h, "big") >> 11) / float(1 << 53)


def draw(length: Length, u: float, floor: int) -> int:
    """The length at quantile u (fixed lengths ignore u), never below `floor` (what a request needs at least)."""
    if isinstance(length, int):
        return max(floor, length)
    if isinstance(length, Uniform):
        lo, hi = length.uniform
        return max(floor, lo + min(hi - lo, int(u * (hi - lo + 1))))
    if isinstance(length, Lognormal):
        s = length.lognormal
        mu = math.log(s.mean) - s.sigma ** 2 / 2  # so the (uncut) lengths' mean is `mean`
        z = NormalDist().inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
        return max(floor, min(s.max, round(math.exp(mu + s.sigma * z))))
    raise ValueError("dataset lengths come from the dataset's own requests")


def bounds(length: Length) -> tuple[int, int] | None:
    """(shortest, longest) a distribution can draw; None for lengths a dataset decides."""
    if isinstance(length, int):
        return length, length
    if isinstance(length, Uniform):
        return length.uniform[0], length.uniform[1]
    if isinstance(length, Lognormal):
        return 1, length.lognormal.max
    return None


def describe(length: Length) -> str:
    """How a report names it: `128`, `uniform 64-512`, `lognormal mean 256, sigma 0.8, max 2048`, `dataset`."""
    if isinstance(length, int):
        return str(length)
    if isinstance(length, Uniform):
        return f"uniform {length.uniform[0]}-{length.uniform[1]}"
    if isinstance(length, Lognormal):
        s = length.lognormal
        return f"lognormal mean {s.mean:g}, sigma {s.sigma:g}, max {s.max}"
    return "the dataset's"
