"""vLLM's metric families and how they read behind a layer: the one place the audit and the per-level server
summaries take their names from. A stack declares the prefixes it puts in place of `vllm:`
(`Stack.metric_aliases()`: Ray Serve exports `ray_vllm_*` on its metrics port, the reference proxy
`proxy_vllm_*`); nothing here guesses at other renamings."""

from __future__ import annotations

ENGINE_PREFIX = "vllm:"

# What each key family tells an operator (the audit flags these when a layer loses them).
KEY_FAMILIES = {
    "vllm:kv_cache_usage_perc": "KV cache usage",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:prefix_cache_hits_total": "prefix-cache hits",
    "vllm:prefix_cache_queries_total": "prefix-cache queries",
    "vllm:time_to_first_token_seconds": "TTFT histogram",
    "vllm:inter_token_latency_seconds": "ITL histogram",
}

# Summarised per level (seed 000's sampling method): gauges by their peak, counters by their delta.
GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
          "kv_cache_usage": "vllm:kv_cache_usage_perc"}
COUNTERS = {"preemptions": "vllm:num_preemptions_total", "prefix_cache_hits": "vllm:prefix_cache_hits_total",
            "prefix_cache_queries": "vllm:prefix_cache_queries_total",
            "generation_tokens": "vllm:generation_tokens_total", "prompt_tokens": "vllm:prompt_tokens_total"}

# The engine's own latency, read as mean over a window from _sum/_count deltas (set beside the client's).
HISTOGRAMS = {"engine_ttft": "vllm:time_to_first_token_seconds", "engine_e2e": "vllm:e2e_request_latency_seconds",
              "engine_itl": "vllm:inter_token_latency_seconds"}
# Tokens per engine step (prefill and decode): its _count delta is the window's steps, its _sum delta their tokens.
STEP_TOKENS = "vllm:iteration_tokens_total"


def aliases(family: str, renames: tuple[str, ...] = ()) -> tuple[str, ...]:
    """`vllm:x` and what a stack that renames with `renames` calls it (`ray_vllm_x`, ...)."""
    base = family.removeprefix(ENGINE_PREFIX)
    return (family, *(f"{prefix}{base}" for prefix in renames))


def renamed_as(family: str, families: set[str], renames: tuple[str, ...]) -> str | None:
    """The name under which `families` carries the engine's `family` through a declared renaming."""
    return next((a for a in aliases(family, renames)[1:] if a in families), None)


def prefix_of(name: str, renames: tuple[str, ...] = ()) -> str:
    """The namespace a family belongs to: `vllm:`, a declared renaming (`ray_vllm_`), else its first word."""
    if ":" in name:
        return name.split(":", 1)[0] + ":"
    for prefix in sorted(renames, key=len, reverse=True):
        if name.startswith(prefix):
            return prefix
    parts = name.split("_")
    if parts[0] == "ray" and len(parts) > 2:  # ray_serve_*, ray_vllm_*: Ray's own namespaces
        return f"{parts[0]}_{parts[1]}_"
    return parts[0] + "_"


def sum_family(samples: dict[str, float], family: str, renames: tuple[str, ...],
               match: tuple[str, ...] = ()) -> float | None:
    """Sum one family over its label sets (engines, replicas), by its own name or the stack's renaming; match:
    only the label sets that contain each of these."""
    for alias in aliases(family, renames):
        prefix = alias + "{"
        vals = [v for k, v in samples.items() if k.startswith(prefix) and all(m in k for m in match)]
        if vals:
            return sum(vals)
    return None
