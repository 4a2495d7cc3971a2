"""Sampled CPU profiles of a deployment's processes in a window that is never judged, and the diagnosis read
from them beside the deltas: the records only; harness.load.profiler samples, harness.analysis.profiles and
harness.analysis.diagnose compute."""

from __future__ import annotations

from pydantic import BaseModel


class FrameCost(BaseModel):
    """One function's share of a process's CPU, in milliseconds of CPU per completed request: `self_ms` where it
    was the innermost frame sampled, `total_ms` where it was anywhere on the stack."""

    frame: str  # "function (file.py)": py-spy's frame without its line, so a function's lines add up
    self_ms: float
    total_ms: float


class ProcessProfile(BaseModel):
    """One process of a side over the profiled window."""

    pid: int
    label: str  # the process's label as in LevelSummary.process_cpu_s ("proxy:stacks.refengine.proxy")
    cpu_s: float  # its CPU over the window, measured (psutil), not sampled
    cores: float  # cpu_s / the window
    # its busiest thread's share of the window on a CPU or runnable and waiting for one (/proc schedstat): near 1,
    # that thread wanted a core all the time, whatever the host gave it
    runnable: float | None = None
    samples: int = 0  # on-CPU stacks py-spy took; 0 with `why_not`
    ms_per_request: float = 0.0  # cpu_s per completed request, in ms
    top: list[FrameCost] = []  # the costliest functions by self time, at most PROFILE_TOP
    collapsed: str | None = None  # the collapsed stacks' file, relative to the run folder
    why_not: str | None = None  # not profiled: why (not a Python process, py-spy could not attach, ...)


class ProfiledLevel(BaseModel):
    """A level's extra window on one side, after its judged windows: every process sampled while the same load
    ran. Its requests are in no statistic; its throughput is set against the judged windows' to show what the
    profiler cost."""

    level: float
    window_s: float
    completed: int
    tok_s: float
    judged_tok_s: float | None = None  # the same side and level's judged windows, mean
    profiler_cpu_s: float = 0.0  # every py-spy process's own CPU over the window
    profiler: str = ""  # "py-spy 0.4.3, 100 Hz, on-CPU samples, nonblocking"
    processes: list[ProcessProfile] = []
    sampled_from_ns: int = 0  # perf_counter_ns when the first py-spy started and when the last one stopped: the
    sampled_to_ns: int = 0  # same clock as RequestRecord's, so a test shows no judged request was sampled

    @property
    def profiler_cost_pct(self) -> float | None:
        """The profiled window's throughput against the judged windows', in % (negative: slower)."""
        if not self.judged_tok_s:
            return None
        return 100.0 * (self.tok_s - self.judged_tok_s) / self.judged_tok_s


class Finding(BaseModel):
    """One rule that fired at one level: what it found, the evidence, and the option to try."""

    rule: str  # "saturated process", "batched streaming", "holds requests back", "queueing in the layer", ...
    level: float
    text: str  # one sentence with its figures
    figure: float | None = None  # the rule's own measure: cores, the batching interval in ms, requests running
    evidence: list[str] = []
    suggest: str | None = None  # a command to try ("make sweep STACK=ray OPT=ingress_replicas=1,2,4")


class FrameDelta(BaseModel):
    """What the stack's processes spend per request in one function beyond the baseline's, in ms of CPU."""

    frame: str
    stack_ms: float
    baseline_ms: float

    @property
    def extra_ms(self) -> float:
        return self.stack_ms - self.baseline_ms


class Diagnosis(BaseModel):
    """Why the layer costs, per level: the rules that fired (none is said too) and the differential's top
    functions; `profiled` says whether the processes were sampled at all, and if not, why."""

    findings: list[Finding] = []
    differential: dict[str, list[FrameDelta]] = {}  # level (as text) -> the largest extra functions, at most 10
    checked: list[str] = []  # the rules that were checked
    profiled: str = ""  # "every process sampled at c=1, 4", or why not ("--no-profile")

    def headline(self) -> str:
        """One line for the terminal and the report's first screen."""
        if not self.findings:
            return f"diagnosis: no rule fired ({', '.join(self.checked)} checked)"
        first = self.findings[0]
        more = f" (+{len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        hint = f"; try `{first.suggest}`" if first.suggest else ""
        return f"diagnosis: {first.text}{hint}{more}"
