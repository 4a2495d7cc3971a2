"""Per-request samples read back from a run folder's requests.jsonl, for figures that need more than a level's
percentiles (the TTFT distribution per level in the compare report). This module owns reading them: which lines
count (measured, successful requests of the latest invocation that measured their repeat) and how their latency
is counted (open loop: from the scheduled send time, exactly as harness/analysis/stats.py does)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.analysis.stats import from_schedule
from harness.load.client import RequestRecord


def ttft_samples(run_dir: Path, keep: set[tuple[str, float, int]] | None = None) -> dict[str, dict[float, list[float]]]:
    """label ("baseline" / "stack") -> level -> every measured successful request's TTFT in ms. The level key is
    LevelStats.level: the concurrency (int) in a closed loop, the offered rate in an open loop. Warmup requests,
    failed ones, lines without a label and unparsable lines are skipped. A repeat measured again by a later
    `compare --resume` (its first try was left incomplete) counts only its latest invocation's requests. keep:
    the (label, level, repeat) that count (CompareSummary.measured_repeats), so a level stopped early is left out
    here as it is from every other figure; None keeps all."""
    path = run_dir / "requests.jsonl"
    # (label, level, repeat) -> (invocation, attempt) -> TTFTs: the latest is picked at the end
    found: dict[tuple[str, float, int], dict[tuple[int, int], list[float]]] = {}
    try:
        lines = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    with lines:
        for line in lines:
            try:
                got = _ttft(json.loads(line))
            except (ValueError, TypeError, AttributeError):  # a torn last line, or not a record at all
                continue
            if got is not None and (keep is None or got[0] in keep):
                key, invocation, ttft = got
                found.setdefault(key, {}).setdefault(invocation, []).append(ttft)
    out: dict[str, dict[float, list[float]]] = {}
    for (label, level, _), by_inv in sorted(found.items(), key=lambda kv: kv[0]):
        out.setdefault(label, {}).setdefault(level, []).extend(by_inv[max(by_inv)])
    return out


def _ttft(d: dict) -> tuple[tuple[str, float, int], tuple[int, int], float] | None:
    """((label, level, repeat), (invocation, attempt), TTFT ms) of a measured successful request, else None. An
    interleaved compare's window measured again (its `attempt` > 0) replaces the try before it."""
    rec = RequestRecord.from_json(d)
    label = d.get("label")
    if rec.phase != "measure" or rec.ok is not True or rec.ttft_ms is None or not isinstance(label, str):
        return None
    if rec.t_task_ns:  # open loop (only its records carry t_task_ns): the level is the offered rate
        level: float = float(rec.level)
        ttft = from_schedule(rec).ttft_ms
    else:
        level, ttft = int(rec.level), rec.ttft_ms
    return ((label, level, int(rec.repeat)), (int(d.get("invocation", 0)), int(d.get("attempt", 0))),  # type: ignore[arg-type]
            float(ttft))
