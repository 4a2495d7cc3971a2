"""Per-level summaries of the scraped server metrics: what the engine itself saw during a level (gauges by
their peak, counters by their delta over the level): running / waiting peaks, KV-cache usage, preemptions,
prefix-cache hits; the engine's own mean TTFT and E2E over the measured window (its histograms, read between
the window's edge scrapes); and the layer's own figures that its stack declares (`LayerMetric`), such as Triton's
queue time per request."""

from __future__ import annotations

from collections.abc import Iterable

from harness.analysis.replicas import loads, merged, split_name
from harness.analysis.vllm_metrics import COUNTERS, GAUGES, HISTOGRAMS, STEP_TOKENS, sum_family
from harness.schemas import LayerMetric, ServerLevelMetrics


def _window_delta(edges: list[dict], family: str, renames: tuple[str, ...]) -> tuple[float, float] | None:
    """A histogram's (_sum, _count) increase between the first and the last edge scrape that carry it."""
    seen = [(total, n) for s in edges if (total := sum_family(s["samples"], f"{family}_sum", renames)) is not None
            and (n := sum_family(s["samples"], f"{family}_count", renames)) is not None]
    if len(seen) < 2:
        return None
    return seen[-1][0] - seen[0][0], seen[-1][1] - seen[0][1]


def _edges(scrapes: list[dict]) -> list[dict]:
    return [s for s in scrapes if s["ok"] and s.get("phase") in ("start", "end")]


def _histogram_means(scrapes: list[dict], renames: tuple[str, ...]) -> dict[str, float]:
    """Mean (ms) and count of each of HISTOGRAMS between the first and the last edge scrape that carry it."""
    out: dict[str, float] = {}
    edges = _edges(scrapes)
    for key, fam in HISTOGRAMS.items():
        if (d := _window_delta(edges, fam, renames)) is not None and d[1] > 0:
            out[f"{key}_ms"] = 1e3 * d[0] / d[1]
            out[f"{key}_n"] = d[1]
    return out


def engine_latency(scrapes: list[dict], renames: tuple[str, ...] = ()
                   ) -> tuple[float | None, float | None, float | None]:
    """The engine's mean TTFT and E2E (ms) over a window, and how many requests its E2E histogram counted."""
    means = _histogram_means(scrapes, renames)
    return means.get("engine_ttft_ms"), means.get("engine_e2e_ms"), means.get("engine_e2e_n")


def summarise(scrapes: Iterable[dict], renames: tuple[str, ...] = (),
              layer: tuple[LayerMetric, ...] = (), window_s: float | None = None) -> ServerLevelMetrics:
    """renames: the prefixes the stack puts in place of `vllm:` (Stack.metric_aliases); layer: the layer's own
    figures its stack declares (Stack.layer_metrics); window_s: the measured window's length (per engine, the
    requests it held are averaged over it)."""
    raw = list(scrapes)
    # several engines of one side (engine@0, engine@1, ...) are read as one, and alone: a layer's endpoint that
    # passes one engine's metrics through (the reference proxy's, to its first engine) would mix with their sum
    engines = [s for s in raw if split_name(s.get("endpoint", "")) is not None]
    scrapes = merged(engines) if engines else raw
    out = ServerLevelMetrics(replicas=loads(raw, renames, window_s))
    means = _histogram_means(scrapes, renames)
    out.engine_ttft_ms, out.engine_e2e_ms, out.engine_requests = (
        means.get("engine_ttft_ms"), means.get("engine_e2e_ms"), means.get("engine_e2e_n"))
    out.engine_itl_ms = means.get("engine_itl_ms")
    if (steps := _window_delta(_edges(scrapes), STEP_TOKENS, renames)) is not None and steps[1] > 0:
        out.engine_step_tokens, out.engine_steps = steps
    firsts: dict[str, float] = {}
    lasts: dict[str, float] = {}
    peaks: dict[str, float] = {}
    unset: set[str] = set()  # engine counters missing from a scrape that carried the engine's others

    def counted(key: str, v: float) -> None:
        firsts.setdefault(key, 0.0 if key in unset else v)
        lasts[key] = v

    # a layer's counters keyed by family and match: two figures may read one family in different label sets
    layer_counters = {f"layer:{f}|{m.match}": (f, m.match) for m in layer for f in (m.family, m.per)
                      if f and m.how != "peak"}
    for s in raw:
        out.scrapes += 1
        if not s["ok"]:
            out.gaps += 1
            out.gap_reasons[s["reason"]] = out.gap_reasons.get(s["reason"], 0) + 1
            continue
        samples = s["samples"]
        for key, (fam, match) in layer_counters.items():
            if (v := sum_family(samples, fam, (), match)) is not None:
                counted(key, v)
        for m in layer:  # a peak of the level is read during it: a window's edge scrape sees it idle
            if m.how == "peak" and s.get("phase") is None and \
                    (v := sum_family(samples, m.family, (), m.match)) is not None:
                peaks[m.key] = max(peaks.get(m.key, v), v)
    for s in scrapes:  # the engine's families: its own endpoint's, or every engine's merged round by round
        if not s["ok"]:
            continue
        samples = s["samples"]
        for key, fam in GAUGES.items():
            v = sum_family(samples, fam, renames)
            if v is not None:
                cur = getattr(out, f"{key}_max")
                setattr(out, f"{key}_max", v if cur is None else max(cur, v))
        # a counter is exported from its first increment on, by some exporters: one missing from a scrape that
        # carries the engine's other counters had not risen yet, and rose from 0 (Ray's, an OpenTelemetry one, has
        # no prefix_cache_hits until the first hit: a window that began before it read 0 hits of 79,000 prompt
        # tokens queried, where the engine hit 61%)
        got = {key: sum_family(samples, fam, renames) for key, fam in COUNTERS.items()}
        for key, v in got.items():
            if v is not None:
                counted(key, v)
            elif key not in firsts and any(x is not None for x in got.values()):
                unset.add(key)
    delta = {key: lasts[key] - firsts[key] for key in lasts}
    for key in COUNTERS:
        if key in delta:
            setattr(out, key, delta[key])
    for m in layer:
        d = delta.get(f"layer:{m.family}|{m.match}")
        if m.how == "peak" and m.key in peaks:
            out.layer[m.key] = peaks[m.key]
        elif m.how == "delta" and d is not None:
            out.layer[m.key] = d
        elif m.how == "per" and d is not None and (n := delta.get(f"layer:{m.per}|{m.match}")):
            out.layer[m.key] = d / n
    return out
