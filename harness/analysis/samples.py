"""Per-request samples read back from a run folder's requests.jsonl, for figures that need more than a level's
percentiles (the TTFT distribution per level in the compare report). This module owns reading them: which lines
count (measured, successful requests of the latest invocation that measured their repeat) and how their latency
is counted (open loop: from the scheduled send time, exactly as harness/analysis/stats.py does)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.stats import from_schedule, schedule_check
from harness.load.client import RequestRecord


def ttft_samples(run_dir: Path, keep: set[tuple[str, float, int]] | None = None) -> dict[str, dict[float, list[float]]]:
    """label ("baseline" / "stack") -> level -> every measured successful request's TTFT in ms. The level key is
    LevelStats.level: the concurrency (int) in a closed loop, the offered rate in an open loop. keep: the (label,
    level, repeat) that count (CompareSummary.measured_repeats), so a level stopped early is left out here as it
    is from every other figure; None keeps all."""
    out: dict[str, dict[float, list[float]]] = {}
    for (label, level, _), recs in measured(run_dir, keep).items():
        out.setdefault(label, {}).setdefault(level, []).extend(t for r in recs if (t := ttft_of(r)) is not None)
    return out


def ttft_of(r: RequestRecord) -> float | None:
    """A request's TTFT in ms as every figure counts it: from its scheduled send time in an open loop (only its
    records carry t_task_ns), from its send otherwise."""
    if r.ttft_ms is None:
        return None
    return float(from_schedule(r).ttft_ms if r.t_task_ns else r.ttft_ms)


def measured(run_dir: Path, keep: set[tuple[str, float, int]] | None = None
             ) -> dict[tuple[str, float, int], list[RequestRecord]]:
    """(label, level, repeat) -> the measured successful requests of its latest try, in the order requests.jsonl
    has them. Warmup requests, failed ones, lines without a label and unparsable lines are skipped. A repeat
    measured again by a later `compare --resume` (its first try was left incomplete), or an interleaved compare's
    window measured again (its `attempt` > 0), counts only its latest try's requests."""
    path = run_dir / "requests.jsonl"
    found: dict[tuple[str, float, int], dict[tuple[int, int], list[RequestRecord]]] = {}
    try:
        lines = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    with lines:
        for line in lines:
            try:
                got = _measured(json.loads(line))
            except (ValueError, TypeError, AttributeError):  # a torn last line, or not a record at all
                continue
            if got is not None and (keep is None or got[0] in keep):
                key, attempt, rec = got
                found.setdefault(key, {}).setdefault(attempt, []).append(rec)
    return {key: by_try[max(by_try)] for key, by_try in sorted(found.items(), key=lambda kv: kv[0])}


def _measured(d: dict) -> tuple[tuple[str, float, int], tuple[int, int], RequestRecord] | None:
    """((label, level, repeat), (invocation, attempt), record) of a measured successful request, else None. In an
    open loop (only its records carry t_task_ns) the level is the offered rate."""
    rec = RequestRecord.from_json(d)
    label = d.get("label")
    if rec.phase != "measure" or rec.ok is not True or not isinstance(label, str):
        return None
    level: float = float(rec.level) if rec.t_task_ns else int(rec.level)
    return ((label, level, int(rec.repeat)), (int(d.get("invocation", 0)), int(d.get("attempt", 0))), rec)


def timelines(run_dir: Path, offsets: Sequence[int], keep: set[tuple[str, float, int]] | None = None
              ) -> dict[str, list[tuple[int, int]]]:
    """label -> (scheduled send, end) in ns of every measured successful request of a replay (a trace's, whose
    requests' offsets are `offsets`), from its schedule: its first window at each level, each window placed on the
    trace's own time (a segment's window after the segments before it). Open-loop records only."""
    out: dict[str, list[tuple[int, int]]] = {}
    seen: set[tuple[str, float]] = set()
    for (label, level, _), recs in measured(run_dir, keep).items():
        if (label, level) in seen or not recs or not recs[0].t_task_ns:
            continue
        seen.add((label, level))
        anchor = min(r.t_due_ns - offsets[r.index % len(offsets)] for r in recs)  # the window's trace time 0
        out.setdefault(label, []).extend((r.t_due_ns - anchor, r.t_end_ns - anchor) for r in recs)
    return out


def by_stretch(run_dir: Path, offsets: Sequence[int], stretch_ns: int, keep: set[tuple[str, float, int]] | None = None
               ) -> dict[str, dict[int, tuple[list[float], list[float]]]]:
    """label -> stretch k of a replay (its requests at stretch_ns x k .. x (k + 1) of the trace) -> (TTFT ms, E2E ms)
    of its measured successful requests, by the trace's time each request is at (`offsets`: the trace's requests'
    offsets, ns; a segment's requests keep theirs), every window of the side pooled. Open-loop records only: latency
    from the scheduled send."""
    out: dict[str, dict[int, tuple[list[float], list[float]]]] = {}
    for (label, _, _), recs in measured(run_dir, keep).items():
        if not recs or not recs[0].t_task_ns:
            continue
        for r in recs:
            timed = from_schedule(r)
            if timed.ttft_ms is None or timed.e2e_ms is None:
                continue
            k = offsets[r.index % len(offsets)] // stretch_ns
            got = out.setdefault(label, {}).setdefault(int(k), ([], []))
            got[0].append(float(timed.ttft_ms))
            got[1].append(float(timed.e2e_ms))
    return out


@dataclass
class SideReplay:
    """What one side's measured requests of a replay say of its sending: how many, how long a trace's chats held
    some of them (ms), how late the client sent them against their due times (ms, every request), and each window's
    (scheduled, achieved) rate, req/s."""

    requests: int = 0
    held: list[float] = field(default_factory=list)
    late: list[float] = field(default_factory=list)
    rates: list[tuple[float, float]] = field(default_factory=list)


def replay_sides(run_dir: Path, keep: set[tuple[str, float, int]] | None = None) -> dict[str, SideReplay]:
    """label -> its SideReplay over every measured window. Open-loop records only."""
    out: dict[str, SideReplay] = {}
    for (label, level, _), recs in measured(run_dir, keep).items():
        if not recs or not recs[0].t_task_ns:
            continue
        side = out.setdefault(label, SideReplay())
        side.requests += len(recs)
        side.held += [r.held_ms for r in recs if r.held_ms > 0]
        side.late += [r.dispatch_delay_ms for r in recs]
        scheduled, achieved, _ = schedule_check(recs, level)
        if scheduled is not None and achieved is not None:
            side.rates.append((scheduled, achieved))
    return out
