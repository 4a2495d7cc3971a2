"""Why the layer costs, per level: a few rules over what a compare measured, each naming its evidence and the
option to try. Each has a known truth in the tests (the reference proxy burning CPU per chunk, batching chunks
every 50 ms, capping the requests it forwards; an A/A fires none).

- saturated process: a process of the layer (not the engine's, not the load client) whose busiest thread was on a
  CPU or waiting for one >= 90% of the profiled window (a Python process computes on one core at a time, the
  GIL's), or, where the kernel keeps no such count, used >= 0.9 cores; while the bare engine served more there;
- batched streaming: the layer delivers more tokens at a time than the bare engine (> 1.5 per read that carried
  content, where the engine delivers <= 1.2: one merged event or several events in one write), the gap between
  those reads (the batching interval) and the TTFT excess named;
- holds requests back: the engine behind the layer ran fewer requests at once (vllm:num_requests_running, its
  peak in the window) than the client had in flight and than the bare engine ran at that level;
- queueing in the layer: the time the layer adds outside the engine (client TTFT less the engine's own, beyond
  the bare API server's) grows with the level, to >= 20 ms and >= 2x its value at the lowest level, and is
  largest at the highest one; or a queue's wait per request the stack declares (Triton's scheduler queue, Ray's
  router) grows the same way from >= 5 ms. Named at the highest level, with the series;
- CPU taken from the engine (a host without GPUs, where both share the cores): the engine's processes got >= 10%
  less CPU behind the layer than bare while the layer's own processes used >= 0.25 core and the host's cores
  were all in use (engine, layer and load client together >= 90% of them): an engine that merely had less to
  do, because the layer sent it less, is not this."""

from __future__ import annotations

from harness.analysis.latency_split import split
from harness.analysis.profiles import differential
from harness.schemas import CompareSummary, LevelDelta, LevelSummary, RunSummary, level_text
from harness.schemas.profiles import Diagnosis, Finding, ProcessProfile, ProfiledLevel

SATURATED = "saturated process"
BATCHED = "batched streaming"
HOLDS_BACK = "holds requests back"
QUEUEING = "queueing in the layer"
CPU_TAKEN = "CPU taken from the engine"
RULES = (SATURATED, BATCHED, HOLDS_BACK, QUEUEING, CPU_TAKEN)
SATURATED_CORES = 0.9
TOKENS_PER_EVENT = 1.5  # the layer's, where the bare engine's is at most BARE_TOKENS_PER_EVENT
BARE_TOKENS_PER_EVENT = 1.2
HELD_SHARE = 0.8  # the engine behind the layer ran at most this share of what the bare engine ran
CPU_TAKEN_SHARE = 0.9
LAYER_CORES = 0.25
HOST_BUSY = 0.9
QUEUE_MIN_MS = 20.0  # the added time at the highest level, at least; a declared queue metric's: QUEUE_METRIC_MS
QUEUE_METRIC_MS = 5.0
QUEUE_GROWTH = 2.0  # the highest level's against the lowest level's (floored at a quarter of the minimum)


def diagnose(s: CompareSummary, hints: dict[str, str] | None = None,
             queues: dict[str, tuple[str, float]] | None = None) -> Diagnosis:
    """Every rule at every judged level; `hints`: the stack's option to try per rule (Stack.tuning()); `queues`:
    the stack's declared queue waits per request (LayerMetric.queue_ms: its key -> what it is, the factor to ms)."""
    hints = hints or {}
    base, stack = s.runs.get("baseline"), s.runs.get("stack")
    d = Diagnosis(checked=list(RULES))
    if base is None or stack is None:
        d.profiled = "no diagnosis: a side was not measured"
        return d
    open_loop = stack.open_loop
    gauges = stack.scrape_policy == "interval" and base.scrape_policy == "interval"
    if not gauges:  # a gauge read at a window's edges says nothing of its peak inside the window
        d.checked = [r if r != HOLDS_BACK else f"{HOLDS_BACK} (not checked: the engine's gauges were read only at "
                     "the windows' edges; a profile with `scrape: interval` checks it)" for r in d.checked]
    engine_titles = {_title(label) for lv in base.levels for label in lv.process_cpu_s}
    prof_s, prof_b = {p.level: p for p in stack.profiled}, {p.level: p for p in base.profiled}
    d.profiled = (f"every process sampled at {', '.join(level_text(c, open_loop) for c in prof_s)}"
                  if prof_s else (stack.profile_note or "the processes were not sampled"))
    for delta in s.levels:
        c = delta.level
        b, t = _last_window(base, c), _last_window(stack, c)
        if b is None or t is None:
            continue
        where = level_text(c, open_loop)
        found = [_saturated(delta, prof_s.get(c), engine_titles, where, s.stack),
                 _batched(b, t, where),
                 _holds_back(b, t, c, open_loop, where) if gauges else None,
                 _cpu_taken(b, t, engine_titles, where, s.host_cores) if not stack.devices else None]
        for f in found:
            if f is not None:
                f.suggest = f.suggest or (f"make sweep STACK={s.stack} OPT={hints[f.rule]}" if f.rule in hints
                                          else None)
                d.findings.append(f)
        if c in prof_s:
            d.differential[where] = differential(prof_s[c], prof_b.get(c))
    if (q := _queueing(s, queues or {}, open_loop)) is not None:
        q.suggest = f"make sweep STACK={s.stack} OPT={hints[QUEUEING]}" if QUEUEING in hints else None
        d.findings.append(q)
    return d


def _queueing(s: CompareSummary, queues: dict[str, tuple[str, float]], open_loop: bool) -> Finding | None:
    """The layer's added time outside the engine, or a declared queue's wait (queues: LevelSummary.server.layer key
    -> what it is and the factor to ms), growing with the level: the first series that does."""
    judged = {lv.level for lv in s.levels if lv.judged}
    added = [(r.level, r.layer_ttft_ms) for r in split(s.runs) if r.level in judged and r.layer_ttft_ms is not None]
    series = [("the time the layer adds to TTFT outside the engine", added, QUEUE_MIN_MS)]
    stack = s.runs["stack"]
    for key, (what, to_ms) in queues.items():
        per = {lv.stats.level: to_ms * lv.server.layer[key] for lv in stack.levels
               if lv.stats.level in judged and key in lv.server.layer}
        series.append((what, sorted(per.items()), QUEUE_METRIC_MS))
    for what, pts, floor in series:
        if len(pts) < 2:
            continue
        (c0, v0), (c1, v1) = pts[0], pts[-1]
        if v1 < floor or v1 < QUEUE_GROWTH * max(v0, floor / 4) or v1 < max(v for _, v in pts):
            continue
        path = ", ".join(f"{v:.0f} ms at {level_text(c, open_loop)}" for c, v in pts)
        return Finding(rule=QUEUEING, level=c1, figure=v1,
                       text=f"requests queue in the layer: {what} grows with the load, from {v0:.0f} ms at "
                            f"{level_text(c0, open_loop)} to {v1:.0f} ms at {level_text(c1, open_loop)}",
                       evidence=[f"{what}: {path}"])
    return None


def _title(label: str) -> str:
    """`vllm:VLLM::Worker` -> `VLLM::Worker`: a process as the engine names itself, whoever started it."""
    return label.split(":", 1)[1] if ":" in label else label


def _last_window(run: RunSummary, c: float) -> LevelSummary | None:
    """The side's last judged window at the level: the rules read the shape of a window, which any one shows."""
    at = [lv for lv in run.levels if lv.stats.level == c and not lv.incomplete]
    return at[-1] if at else None


def _layer(p: ProcessProfile, engine_titles: set[str]) -> bool:
    return p.label != "load client" and _title(p.label) not in engine_titles


def _demand(p: ProcessProfile) -> float:
    return p.runnable if p.runnable is not None else p.cores


def _saturated(delta: LevelDelta, prof: ProfiledLevel | None, engine_titles: set[str], where: str,
               stack: str) -> Finding | None:
    if prof is None or not delta.baseline_tok_s or not delta.stack_tok_s:
        return None
    if delta.baseline_tok_s <= delta.stack_tok_s:  # the engine had no headroom the layer kept it from
        return None
    hot = [p for p in prof.processes if _layer(p, engine_titles) and _demand(p) >= SATURATED_CORES]
    if not hot:
        return None
    p = max(hot, key=_demand)
    top = p.top[0] if p.top else None
    share = f"; {100 * top.self_ms / p.ms_per_request:.0f}% of its samples in {top.frame}" \
        if top and p.ms_per_request else ""
    busy = (f"its busiest thread on a core or waiting for one {100 * p.runnable:.0f}% of the time, "
            f"{p.cores:.2f} cores used") if p.runnable is not None else f"{p.cores:.2f} cores"
    return Finding(rule=SATURATED, level=prof.level, figure=_demand(p),
                   text=f"{stack}'s {p.label} process saturated at {where}: {busy}{share}",
                   evidence=[f"{p.label} (pid {p.pid}): {p.cpu_s:.2f} s of CPU in a {prof.window_s:.1f} s profiled "
                             f"window, {p.ms_per_request:.2f} ms per request",
                             f"the bare engine served {delta.baseline_tok_s:.0f} tok/s at {where}, the layer "
                             f"{delta.stack_tok_s:.0f}"])


def _batched(b: LevelSummary, t: LevelSummary, where: str) -> Finding | None:
    tb, ts = _per_arrival(b), _per_arrival(t)
    if tb is None or ts is None or ts <= TOKENS_PER_EVENT or tb > BARE_TOKENS_PER_EVENT:
        return None
    gap = t.stats.arrival_gap_ms.p50 if t.stats.arrival_gap_ms.n else t.stats.itl_ms.p50
    excess = (t.stats.ttft_ms.p50 - b.stats.ttft_ms.p50) if t.stats.ttft_ms.p50 is not None and \
        b.stats.ttft_ms.p50 is not None else None
    text = f"the layer delivers {ts:.1f} tokens at a time at {where} (the bare engine {tb:.1f})"
    if gap is not None:
        text += f", every {gap:.0f} ms (p50): it batches the stream at about {gap:.0f} ms"
    ev = [f"tokens per read that carried content: {ts:.2f} behind the layer, {tb:.2f} bare; tokens per SSE event "
          f"{t.stats.tokens_per_chunk or 0:.2f} and {b.stats.tokens_per_chunk or 0:.2f}"]
    if excess is not None:
        ev.append(f"TTFT p50 {excess:+.0f} ms behind the layer")
    return Finding(rule=BATCHED, level=t.stats.level, text=text, evidence=ev, figure=gap)


def _per_arrival(lv: LevelSummary) -> float | None:
    """Tokens per read that carried content (a run from before arrivals were counted: per SSE event)."""
    return lv.stats.tokens_per_arrival if lv.stats.tokens_per_arrival is not None else lv.stats.tokens_per_chunk


def _holds_back(b: LevelSummary, t: LevelSummary, c: float, open_loop: bool, where: str) -> Finding | None:
    rb, rt = b.server.running_max, t.server.running_max
    if open_loop or rb is None or rt is None or rb <= 0:
        return None
    if rt > HELD_SHARE * rb or rt >= c:
        return None
    return Finding(rule=HOLDS_BACK, level=c, figure=rt,
                   text=f"the layer holds requests back at {where}: the engine behind it ran at most {rt:g} at once, "
                        f"the bare engine {rb:g}, with {c:g} in flight from the client",
                   evidence=[f"vllm:num_requests_running, peak in the window: {rt:g} behind the layer, {rb:g} bare"])


def _cpu_taken(b: LevelSummary, t: LevelSummary, engine_titles: set[str], where: str,
               host_cores: int) -> Finding | None:
    if not b.window_s or not t.window_s or host_cores <= 0:
        return None
    engine_b = sum(v for k, v in b.process_cpu_s.items() if _title(k) in engine_titles) / b.window_s
    engine_t = sum(v for k, v in t.process_cpu_s.items() if _title(k) in engine_titles) / t.window_s
    layer = {k: v / t.window_s for k, v in t.process_cpu_s.items() if _title(k) not in engine_titles}
    layer_cores = sum(layer.values())
    busy = engine_t + layer_cores + t.client.cpu_pct / 100
    if engine_b <= 0 or engine_t > CPU_TAKEN_SHARE * engine_b or layer_cores < LAYER_CORES \
            or busy < HOST_BUSY * host_cores:
        return None
    return Finding(rule=CPU_TAKEN, level=t.stats.level, figure=layer_cores,
                   text=f"the layer's processes took {layer_cores:.2f} cores at {where} and the engine's fell from "
                        f"{engine_b:.2f} to {engine_t:.2f} cores, with all {host_cores} of this host's cores in use",
                   evidence=[f"{k}: {v:.2f} cores" for k, v in sorted(layer.items(), key=lambda kv: -kv[1])[:3]])
