"""layerbench's Triton Python-backend model, modelled on NVIDIA's vLLM backend: vLLM's async engine in the stub
process, streaming (decoupled). stacks/triton.py copies it into the model repository it generates per deployment
as `<model>/1/model.py`, beside `engine.json` (the engine settings, exactly the bare vLLM baseline's). It runs in
Triton's Python stub, in the Triton environment, so it imports nothing of layerbench.

Built as NVIDIA's vLLM backend is built (github.com/triton-inference-server/vllm_backend, src/model.py):
- the engine lives in a thread of its own running an asyncio loop (`asyncio.run`), inside the async context
  manager vLLM's OpenAI server builds it with (`build_async_engine_client_from_engine_args`, vLLM
  vllm/entrypoints/launchers/api_server/entry.py); with report_engine_metrics on, the same steps with stat loggers
  passed on, as NVIDIA's own copy of that function does (src/utils/vllm_backend_utils.py);
- `execute()` hands each request to that loop and returns;
- responses leave from a dedicated response thread fed by a queue, so the engine's loop never waits while
  Triton's sender passes a response to the server ("It allows vLLM to keep making progress while response
  sender(s) are sending responses", NVIDIA's src/model.py); that thread also asks the sender whether the client
  went away, and the loop aborts the request when it did;
- engine metrics, when published, are handed to a thread of their own too (NVIDIA's src/utils/metrics.py);
- at finalize the engine waits for the requests in flight, then shuts down.

Inputs as in NVIDIA's backend: `text_input`, `stream`, `sampling_parameters` (a JSON string),
`exclude_input_in_output` (`return_num_input_tokens` and `return_num_output_tokens` are accepted; the counts are
always sent). Every response carries `num_output_tokens`, the tokens the engine produced for it, and the first one
`num_input_tokens`, so a client takes token counts from the server, never from counting events. With
`report_engine_metrics` the engine's counters, gauges and histograms are published under their `vllm:*` names
through Triton's custom-metric API on Triton's metrics port (off by default, like NVIDIA's backend). At start-up
the applied engine settings and the vLLM version are written to `applied.json` next to this file.
vLLM is imported inside functions, so the response path loads (and is tested) without vLLM or Triton.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import traceback
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
SECONDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]


def log(message: str) -> None:
    print(f"layerbench model: {message}", flush=True)  # the stub's output lands in Triton's log


@dataclass
class RequestState:
    """One request's sender, and what the response thread learned of it (read by the engine's loop)."""
    sender: Any
    cancelled: bool = False
    final_queued: bool = False


class InFlight:
    """Requests started and not yet answered with their final response; finalize waits for none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = 0

    def start(self) -> None:
        with self._lock:
            self._n += 1

    def end(self) -> None:
        with self._lock:
            self._n -= 1

    def count(self) -> int:
        return self._n  # one int read: atomic


class ResponseThread:
    """Sends every response from one thread, in the order the engine's loop queued them, so the loop never waits
    on a sender. After each response that is not a request's last, the sender is asked whether the client went
    away; the answer goes in the request's state, where the loop reads it."""

    def __init__(self, on_final: Callable[[], None]):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._on_final = on_final
        self._thread = threading.Thread(target=self._run, name="triton-responses", daemon=True)
        self._thread.start()

    def put(self, state: RequestState, response: Any, flags: int = 0) -> None:
        """Called on the engine's loop: queue a response and return at once."""
        if flags & FINAL:
            state.final_queued = True
        self._queue.put((state, response, flags))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            state, response, flags = item
            try:
                state.sender.send(response, flags=flags)
                if not state.final_queued:
                    state.cancelled = bool(state.sender.is_cancelled())
            except Exception:  # one request's stream broke; the others keep being answered
                log(f"a response could not be sent: {traceback.format_exc()}")
            finally:
                if flags & FINAL:
                    self._on_final()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()


@dataclass
class Parsed:
    prompt: str
    stream: bool
    exclude_input: bool
    params: dict


def parse(request) -> Parsed:
    """The request's inputs, named as NVIDIA's vLLM backend names them."""
    params = json.loads(_scalar(request, "sampling_parameters", b"{}") or b"{}")
    if not isinstance(params, dict):
        raise ValueError("sampling_parameters is not a JSON object")
    return Parsed(prompt=_scalar(request, "text_input").decode(), stream=bool(_scalar(request, "stream", False)),
                  exclude_input=bool(_scalar(request, "exclude_input_in_output", False)), params=params)


def error_response(message: str):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


def output_response(out, request: Parsed, first: bool):
    """One engine output as a response: the new text (all of it when not streaming), its token count, and the
    prompt's token count on the first."""
    completion = out.outputs[0]
    text = completion.text
    if first and not request.exclude_input and not request.stream:
        text = request.prompt + text
    tensors = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
               pb_utils.Tensor("num_output_tokens", np.array([len(completion.token_ids)], dtype=np.uint32))]
    if first:
        n_in = len(out.prompt_token_ids or ())
        tensors.append(pb_utils.Tensor("num_input_tokens", np.array([n_in], dtype=np.uint32)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


async def relay(engine, request: Parsed, sampling, request_id: str, state: RequestState,
                responses: ResponseThread) -> None:
    """The engine's outputs for one request, queued as responses for the response thread; runs on the engine's
    loop and never calls the sender. Every request ends with exactly one final response."""
    first = True
    try:
        async for out in engine.generate(request.prompt, sampling, request_id):
            if state.cancelled:  # the client went away: stop generating, as vLLM's server does
                await engine.abort(request_id)
                break
            responses.put(state, output_response(out, request, first), FINAL if out.finished else 0)
            first = False
    except Exception as e:  # the request ends with the engine's error, the model keeps serving
        log(f"{request_id} failed: {traceback.format_exc()}")
        responses.put(state, error_response(f"{type(e).__name__}: {e}"), FINAL)
        with suppress(Exception):
            await engine.abort(request_id)
    if not state.final_queued:  # cancelled: end the stream, or Triton holds it open
        responses.put(state, None, FINAL)


def sampling_params(request: Parsed):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    kind = RequestOutputKind.DELTA if request.stream else RequestOutputKind.FINAL_ONLY
    return SamplingParams(**request.params, output_kind=kind)


def open_engine(spec: dict, stat_loggers: list):
    """The engine as an async context manager, built as vLLM's OpenAI server builds it; with stat loggers, the
    same steps with the loggers passed on (vLLM's function takes none), as NVIDIA's backend does."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    try:  # vLLM 0.32; earlier versions (NVIDIA's images) keep it in vllm/entrypoints/openai/api_server.py
        from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client_from_engine_args
    except ImportError:
        from vllm.entrypoints.openai.api_server import build_async_engine_client_from_engine_args
    engine_args = AsyncEngineArgs(**spec)
    if not stat_loggers:
        return build_async_engine_client_from_engine_args(engine_args)
    return _engine_with_loggers(engine_args, stat_loggers)


@asynccontextmanager
async def _engine_with_loggers(engine_args, stat_loggers: list) -> AsyncIterator[Any]:
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    usage = UsageContext.OPENAI_API_SERVER
    vllm_config = engine_args.create_engine_config(usage_context=usage)
    engine = None
    try:
        engine = AsyncLLM.from_vllm_config(
            vllm_config=vllm_config, usage_context=usage, stat_loggers=stat_loggers,
            enable_log_requests=engine_args.enable_log_requests,
            aggregate_engine_logging=engine_args.aggregate_engine_logging,
            disable_log_stats=engine_args.disable_log_stats)
        await engine.reset_mm_cache()
        yield engine
    finally:
        if engine is not None:
            engine.shutdown()


class MetricsThread:
    """Applies metric updates (metric, "increment" | "observe" | "set", value) from a queue, so the engine's
    loop, where vLLM calls the stat loggers, never waits on Triton's metric API."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="triton-metrics", daemon=True)
        self._thread.start()

    def put(self, metric, op: str, value: float) -> None:
        self._queue.put((metric, op, value))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            metric, op, value = item
            try:
                getattr(metric, op)(value)
            except Exception:
                log(f"a metric update failed: {traceback.format_exc()}")

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()


def stat_logger_factory(labels: dict[str, str], updates: MetricsThread) -> Callable:
    """vLLM's stats -> Triton custom metrics, named as vLLM names them (labels: model, version)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    F = pb_utils.MetricFamily
    families: list = []  # a family must outlive its metrics

    def metric(name: str, kind, doc: str, buckets: list | None = None):
        fam = F(name=name, description=doc, kind=kind)
        families.append(fam)
        return fam.Metric(labels=labels, buckets=buckets) if buckets else fam.Metric(labels=labels)

    class TritonStatLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0):
            C, G, H = F.COUNTER, F.GAUGE, F.HISTOGRAM
            self.prompt = metric("vllm:prompt_tokens_total", C, "Prefill tokens processed.")
            self.generation = metric("vllm:generation_tokens_total", C, "Generation tokens processed.")
            self.preemptions = metric("vllm:num_preemptions_total", C, "Cumulative preemptions.")
            self.cache_queries = metric("vllm:prefix_cache_queries_total", C, "Prefix-cache queries (tokens).")
            self.cache_hits = metric("vllm:prefix_cache_hits_total", C, "Prefix-cache hits (tokens).")
            self.success = metric("vllm:request_success_total", C, "Finished requests.")
            self.running = metric("vllm:num_requests_running", G, "Requests in model execution batches.")
            self.waiting = metric("vllm:num_requests_waiting", G, "Requests waiting to be processed.")
            self.kv_usage = metric("vllm:kv_cache_usage_perc", G, "KV-cache usage, 1 = full.")
            self.ttft = metric("vllm:time_to_first_token_seconds", H, "Time to first token.", SECONDS)
            self.itl = metric("vllm:inter_token_latency_seconds", H, "Inter-token latency.", SECONDS)
            self.e2e = metric("vllm:e2e_request_latency_seconds", H, "End-to-end request latency.", SECONDS)
            self.queue = metric("vllm:request_queue_time_seconds", H, "Time in the WAITING phase.", SECONDS)
            self.prefill = metric("vllm:request_prefill_time_seconds", H, "Time in the PREFILL phase.", SECONDS)
            self.decode = metric("vllm:request_decode_time_seconds", H, "Time in the DECODE phase.", SECONDS)
            self.tpot = metric("vllm:request_time_per_output_token_seconds", H, "Time per output token.", SECONDS)
            self.req_prompt = metric("vllm:request_prompt_tokens", H, "Prompt tokens per request.", TOKENS)
            self.req_gen = metric("vllm:request_generation_tokens", H, "Generation tokens per request.", TOKENS)

        def _add(self, counter, value: float) -> None:
            if value:
                updates.put(counter, "increment", value)

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
            if scheduler_stats is not None:
                updates.put(self.running, "set", scheduler_stats.num_running_reqs)
                updates.put(self.waiting, "set", scheduler_stats.num_waiting_reqs)
                updates.put(self.kv_usage, "set", scheduler_stats.kv_cache_usage)
                self._add(self.cache_queries, scheduler_stats.prefix_cache_stats.queries)
                self._add(self.cache_hits, scheduler_stats.prefix_cache_stats.hits)
            if iteration_stats is None:
                return
            self._add(self.prompt, iteration_stats.num_prompt_tokens)
            self._add(self.generation, iteration_stats.num_generation_tokens)
            self._add(self.preemptions, iteration_stats.num_preempted_reqs)
            for t in iteration_stats.time_to_first_tokens_iter:
                updates.put(self.ttft, "observe", t)
            for t in iteration_stats.inter_token_latencies_iter:
                updates.put(self.itl, "observe", t)
            for fin in iteration_stats.finished_requests:
                self._add(self.success, 1)
                observed = ((self.e2e, fin.e2e_latency), (self.queue, fin.queued_time),
                            (self.prefill, fin.prefill_time), (self.decode, fin.decode_time),
                            (self.tpot, fin.mean_time_per_output_token), (self.req_prompt, fin.num_prompt_tokens),
                            (self.req_gen, fin.num_generation_tokens))
                for hist, value in observed:
                    updates.put(hist, "observe", value)

        def log_engine_initialized(self) -> None:
            pass

    return TritonStatLogger


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        here = Path(args["model_repository"]) / args["model_version"]
        spec = json.loads((here / "engine.json").read_text())
        self.metrics: MetricsThread | None = None
        loggers = []
        if spec.pop("report_engine_metrics", False):
            self.metrics = MetricsThread()
            labels = {"model": args["model_name"], "version": args["model_version"]}
            loggers = [stat_logger_factory(labels, self.metrics)]
        self.inflight = InFlight()
        self.responses = ResponseThread(self.inflight.end)
        self.engine: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self.engine_thread = threading.Thread(target=asyncio.run, args=(self._serve(spec, loggers),),
                                              name="vllm-engine-loop", daemon=True)
        self.engine_thread.start()
        self._started.wait()
        if self._start_error is not None:
            self.engine_thread.join()
            self.responses.close()
            raise self._start_error
        self._write_applied(here)
        self.counter = 0

    async def _serve(self, spec: dict, loggers: list) -> None:
        """The engine's thread: the engine lives inside this coroutine until finalize, then waits for the
        requests in flight and shuts down."""
        try:
            async with open_engine(spec, loggers) as engine:
                self.loop, self._stop, self.engine = asyncio.get_running_loop(), asyncio.Event(), engine
                self._started.set()
                await self._stop.wait()
                while self.inflight.count() > 0:
                    log(f"waiting for {self.inflight.count()} requests in flight")
                    await asyncio.sleep(0.5)
        except BaseException as e:
            if self._started.is_set():
                raise
            self._start_error = e
            self._started.set()

    def _write_applied(self, here: Path) -> None:
        import vllm

        cfg = self.engine.vllm_config
        (here / "applied.json").write_text(json.dumps({
            "vllm_version": vllm.__version__, "max_model_len": cfg.model_config.max_model_len,
            "max_num_seqs": cfg.scheduler_config.max_num_seqs, "dtype": str(cfg.model_config.dtype),
            "enforce_eager": cfg.model_config.enforce_eager,
            "enable_prefix_caching": cfg.cache_config.enable_prefix_caching,
            "engine_builder": "build_async_engine_client_from_engine_args" if self.metrics is None
            else "AsyncLLM.from_vllm_config with stat loggers", "response_thread": True}))

    def execute(self, requests: list) -> None:
        assert self.loop is not None
        for request in requests:  # decoupled: hand each request to the engine's loop and return
            self.counter += 1
            asyncio.run_coroutine_threadsafe(self._infer(request, f"triton-{self.counter}"), self.loop)
        return None

    async def _infer(self, request, request_id: str) -> None:
        state = RequestState(request.get_response_sender())
        self.inflight.start()
        try:
            parsed = parse(request)
            sampling = sampling_params(parsed)
        except (ValueError, TypeError, AttributeError) as e:
            self.responses.put(state, error_response(f"bad request: {e}"), FINAL)
            return
        await relay(self.engine, parsed, sampling, request_id, state, self.responses)

    def finalize(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.engine_thread.join()
        self.responses.close()
        if self.metrics is not None:
            self.metrics.close()


def _scalar(request, name: str, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]
