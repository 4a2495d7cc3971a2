"""Per-level summaries of the scraped server metrics: what the engine itself saw during a level (gauges by
their peak, counters by their delta over the level): running / waiting peaks, KV-cache usage, preemptions,
prefix-cache hits; and the layer's own figures that its stack declares (`LayerMetric`), such as Triton's
queue time per request."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

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
    layer: dict[str, float] = {}  # LayerMetric.key -> value over the level


class LayerMetric(BaseModel):
    """One figure of the layer's own metrics, summarised per level: a gauge's peak (from scrapes during the
    window: `scrape: interval`), a counter's delta, or a counter's delta per request (the delta of `per`)."""

    key: str  # the report's column
    family: str
    how: Literal["peak", "delta", "per"] = "delta"
    per: str | None = None  # with how="per": the counter that counts what the delta is divided by
    note: str = ""  # what a reader must know about it


def _sum_family(samples: dict[str, float], family: str, renames: tuple[str, ...]) -> float | None:
    """Sum one family over its label sets (engines, replicas), by its own name or the stack's renaming."""
    for alias in aliases(family, renames):
        prefix = alias + "{"
        vals = [v for k, v in samples.items() if k.startswith(prefix)]
        if vals:
            return sum(vals)
    return None


def summarise(scrapes: Iterable[dict], renames: tuple[str, ...] = (),
              layer: tuple[LayerMetric, ...] = ()) -> ServerLevelMetrics:
    """renames: the prefixes the stack puts in place of `vllm:` (Stack.metric_aliases); layer: the layer's own
    figures its stack declares (Stack.layer_metrics)."""
    out = ServerLevelMetrics()
    firsts: dict[str, float] = {}
    lasts: dict[str, float] = {}
    peaks: dict[str, float] = {}
    counters = {**COUNTERS, **{f"layer:{f}": f for m in layer for f in (m.family, m.per) if f and m.how != "peak"}}
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
        for key, fam in counters.items():
            v = _sum_family(samples, fam, renames)
            if v is not None:
                firsts.setdefault(key, v)
                lasts[key] = v
        for m in layer:  # a peak of the level is read during it: a window's edge scrape sees it idle
            if m.how == "peak" and s.get("phase") is None and (v := _sum_family(samples, m.family, ())) is not None:
                peaks[m.key] = max(peaks.get(m.key, v), v)
    delta = {key: lasts[key] - firsts[key] for key in lasts}
    for key in COUNTERS:
        if key in delta:
            setattr(out, key, delta[key])
    for m in layer:
        d = delta.get(f"layer:{m.family}")
        if m.how == "peak" and m.key in peaks:
            out.layer[m.key] = peaks[m.key]
        elif m.how == "delta" and d is not None:
            out.layer[m.key] = d
        elif m.how == "per" and d is not None and (n := delta.get(f"layer:{m.per}")):
            out.layer[m.key] = d / n
    return out
