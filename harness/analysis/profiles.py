"""Sampled stacks into CPU per request: each process's measured CPU split over its functions in proportion to its
on-CPU samples, and the differential, what the stack's processes spend per request beyond the baseline's.

py-spy's raw output (`record --format raw`) is one collapsed stack per line, outermost frame first, frames
separated by ';' and the sample count last: `<module> (server.py:12);main (server.py:10);work (server.py:4) 3`
(py-spy 0.4.3, src/flamegraph.rs writes `{stack} {count}`). A frame is `function (file:line)`; the line is dropped
here so a function's lines add up."""

from __future__ import annotations

import re
from collections import Counter

from harness.schemas.profiles import FrameCost, FrameDelta, ProcessProfile, ProfiledLevel

PROFILE_TOP = 15  # functions kept per process and level
DIFFERENTIAL_TOP = 10
_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME_LINE = re.compile(r"^(?P<fn>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def parse_collapsed(text: str) -> Counter[tuple[str, ...]]:
    """Collapsed stacks -> sample count per stack (frames without their line numbers); lines that are not a
    stack and a count are skipped."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m and m["stack"]:
            stacks[tuple(frame_name(f) for f in m["stack"].split(";"))] += int(m["count"])
    return stacks


def frame_name(frame: str) -> str:
    """`work (stacks/refengine/proxy.py:231)` -> `work (stacks/refengine/proxy.py)`; anything else as it is."""
    m = _FRAME_LINE.match(frame.strip())
    return f"{m['fn']} ({m['file']})" if m else frame.strip()


def frame_costs(stacks: Counter[tuple[str, ...]], ms_per_request: float, top: int = PROFILE_TOP) -> list[FrameCost]:
    """Each function's self and total share of the samples times the process's CPU per request, costliest self
    first."""
    n = sum(stacks.values())
    if not n:
        return []
    selfs: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for frames, count in stacks.items():
        selfs[frames[-1]] += count
        for f in set(frames):  # a recursive function counts once per sample
            totals[f] += count
    scale = ms_per_request / n
    ranked = sorted(totals, key=lambda f: (-selfs[f], -totals[f], f))[:top]
    return [FrameCost(frame=f, self_ms=selfs[f] * scale, total_ms=totals[f] * scale) for f in ranked]


def process_profile(p: ProcessProfile, stacks: Counter[tuple[str, ...]] | None, completed: int) -> ProcessProfile:
    """A process's record (its measured CPU in `p`) with that CPU per completed request split over its sampled
    functions."""
    per_req = 1000.0 * p.cpu_s / completed if completed else 0.0
    stacks = stacks or Counter()
    return p.model_copy(update={"samples": sum(stacks.values()), "ms_per_request": per_req,
                                "top": frame_costs(stacks, per_req)})


def speedscope(processes: dict[str, Counter[tuple[str, ...]]], name: str) -> dict:
    """Stacks as speedscope's JSON, one sampled profile per process (jlfwong/speedscope,
    src/lib/file-format-spec.ts: `shared.frames`; per profile `type: sampled`, `samples` as frame indices outermost
    first, `weights`)."""
    frames: dict[str, int] = {}
    profiles = []
    for proc, stacks in processes.items():
        samples = [[frames.setdefault(f, len(frames)) for f in stack] for stack in stacks]
        weights = list(stacks.values())
        profiles.append({"type": "sampled", "name": proc, "unit": "none", "startValue": 0,
                         "endValue": sum(weights), "samples": samples, "weights": weights})
    return {"$schema": "https://www.speedscope.app/file-format-schema.json", "name": name, "exporter": "layerbench",
            "shared": {"frames": [{"name": f} for f in frames]}, "profiles": profiles}


def self_ms_by_frame(level: ProfiledLevel, skip: tuple[str, ...] = ("load client",)) -> Counter[str]:
    """A side's CPU per request by function, summed over its processes (the load client's left out: both sides
    run the same one). Only the kept top functions count; a function below every process's top is not named."""
    out: Counter[str] = Counter()
    for p in level.processes:
        if p.label in skip:
            continue
        for fc in p.top:
            out[fc.frame] += fc.self_ms
    return out


def differential(stack: ProfiledLevel, baseline: ProfiledLevel | None, top: int = DIFFERENTIAL_TOP) -> list[FrameDelta]:
    """The functions the stack's processes spend the most CPU per request in beyond the baseline's, largest first;
    without a baseline profile, the stack's own costliest."""
    s = self_ms_by_frame(stack)
    b = self_ms_by_frame(baseline) if baseline is not None else Counter()
    deltas = [FrameDelta(frame=f, stack_ms=s[f], baseline_ms=b.get(f, 0.0)) for f in s]
    deltas = [d for d in deltas if d.extra_ms > 0]
    return sorted(deltas, key=lambda d: -d.extra_ms)[:top]
