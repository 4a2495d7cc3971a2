"""One run object handed down: what a command measures with, built once by harness/procedures/pipeline.py (the
profile, where results go, how progress is told, how many repeats, a resumed run's plan, the client's placement, the
target), and where one deployment sits in the run (`Side`) and where its windows go (`Windows`). They replace the
8-13 positional parameters every step of measurement once took."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from harness.load.barrier import Shard
from harness.profile.schema import LoadProfile
from harness.results import RunWriter
from harness.schemas import RunSummary

if TYPE_CHECKING:  # resume reads the sweep's file names, and the sweep takes a Run
    from harness.measure.resume import ResumePlan


Profiling = bool | Callable[[RunSummary], bool]


@dataclass(frozen=True)
class Output:
    """How measurement tells progress: `say` one line (rich markup allowed), `bars()` the live bars of a sweep's
    levels. No measure or procedure module prints; the command decides where this goes (`Output.to(console)`)."""

    say: Callable[..., None]
    bars: Callable[[], Progress]

    @classmethod
    def to(cls, console: Console) -> Output:
        return cls(say=console.print, bars=lambda: Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[errors]}"), console=console))


@dataclass(frozen=True)
class Run:
    """What one command measures with. `repeats`: measured sweeps per deployment (None: the profile's). `plan`:
    a resumed compare's. `placement`: the client's priority and cores, as run.json records them."""

    profile: LoadProfile
    writer: RunWriter
    out: Output
    repeats: int | None = None
    plan: ResumePlan | None = None
    placement: dict[str, Any] | None = None
    target: str = "local"
    profiling: bool = False  # a compare samples every process in one more window per level (harness.measure.profiled)

    def n_repeats(self) -> int:
        return self.repeats or self.profile.repeats

    def with_profile(self, profile: LoadProfile) -> Run:
        return replace(self, profile=profile)

    def with_repeats(self, repeats: int | None) -> Run:
        return replace(self, repeats=repeats)

    def with_profiling(self, on: bool) -> Run:
        return replace(self, profiling=on)

    @property
    def invocation(self) -> int:
        return self.plan.invocation if self.plan else 0


@dataclass(frozen=True)
class Side:
    """One deployment in a run: its label; `prior`, what an earlier invocation (or an earlier deployment of this
    side in a compare of several pairs) measured on it; `pair`, which of a compare's pairs it is (None: the only
    one); `calibrate`, a GPU-like engine's first deployment finds the levels this host holds."""

    label: str
    prior: RunSummary | None = None
    pair: int | None = None
    calibrate: bool = False
    profile: Profiling = False  # see Windows
    profile_only: bool = False  # no judged window: the warm-up sweep and the profiled windows (a pass of its own)


@dataclass(frozen=True)
class Windows:
    """Where a sweep's windows go. skip: (repeat, level) measured before (`compare --resume`). shard: this
    process's part of a side's load (one of several load pods). first_repeat, pair: a compare's later deployment
    numbers its windows after the earlier ones'. calibrate: see Side."""

    skip: frozenset[tuple[int, float]] = field(default_factory=frozenset)
    shard: Shard | None = None
    first_repeat: int = 0
    pair: int = 0
    calibrate: bool = False
    # after the judged windows, each level once more with every process sampled; a callable is asked then, with
    # the side's summary (a sequential compare's look is taken there, before the deployment is torn down)
    profile: Profiling = False

    def profiled(self, summary: RunSummary) -> bool:
        return self.profile(summary) if callable(self.profile) else self.profile
