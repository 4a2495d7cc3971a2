"""Per-level summaries of the scraped server metrics: what the engine itself saw during a level
(seed 000's sampling method): running / waiting peaks, KV-cache usage, preemptions, prefix-cache hits."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from harness.vllm_metrics import COUNTERS, GAUGES, aliases


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


def _sum_family(samples: dict[str, float], family: str, renames: tuple[str, ...]) -> float | None:
    """Sum one family over its label sets (engines, replicas), by its own name or the stack's renaming."""
    for alias in aliases(family, renames):
        prefix = alias + "{"
        vals = [v for k, v in samples.items() if k.startswith(prefix)]
        if vals:
            return sum(vals)
    return None


def summarise(scrapes: Iterable[dict], renames: tuple[str, ...] = ()) -> ServerLevelMetrics:
    """renames: the prefixes the stack puts in place of `vllm:` (Stack.metric_aliases)."""
    out = ServerLevelMetrics()
    firsts: dict[str, float] = {}
    lasts: dict[str, float] = {}
    for s in scrapes:
        out.scrapes += 1
        if not s["ok"]:
            out.gaps += 1
            out.gap_reasons[s["reason"]] = out.gap_reasons.get(s["reason"], 0) + 1
            continue
        samples = s["samples"]
        for key, fam in GAUGES.items():
            v = _sum_family(samples, fam, renames)
            if v is not None:
                cur = getattr(out, f"{key}_max")
                setattr(out, f"{key}_max", v if cur is None else max(cur, v))
        for key, fam in COUNTERS.items():
            v = _sum_family(samples, fam, renames)
            if v is not None:
                firsts.setdefault(key, v)
                lasts[key] = v
    for key in COUNTERS:
        if key in lasts:
            setattr(out, key, lasts[key] - firsts[key])
    return out
