"""The engine's prefix-cache hit rate per level, from its own counters: the increase of
vllm:prefix_cache_hits_total over that of vllm:prefix_cache_queries_total (tokens) across each measured window,
summed over the level's windows.

Every prompt of a run begins with a block of its own (harness.load.prompts), so an engine that still finds prompt
tokens in its cache is reusing something the run did not mean to share: a chat template's common system prompt in
front of the unique block, or a layer that rewrites prompts. A level above UNIQUE_MAX is flagged; a layer's cost
measured against a baseline that cached differently is not the layer's alone."""

from __future__ import annotations

from harness.schemas import RunSummary

UNIQUE_MAX = 0.05  # share of prompt tokens served from the prefix cache above which the unique prefix did not hold


def hit_rates(run: RunSummary | None) -> dict[float, float]:
    """level -> the engine's prefix-cache hit rate over its windows; levels without the counters are left out."""
    hits: dict[float, float] = {}
    queries: dict[float, float] = {}
    for lv in run.levels if run is not None else []:
        h, q = lv.server.prefix_cache_hits, lv.server.prefix_cache_queries
        if h is None or q is None:
            continue
        key = lv.stats.level
        hits[key], queries[key] = hits.get(key, 0.0) + h, queries.get(key, 0.0) + q
    return {k: hits[k] / q for k, q in queries.items() if q > 0}


def reused(rates: dict[float, float]) -> dict[float, float]:
    """The levels whose hit rate says the unique prefix did not hold."""
    return {k: v for k, v in rates.items() if v > UNIQUE_MAX}
