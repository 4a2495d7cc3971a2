"""layerbench's Triton Python-backend model: vLLM's async engine in the stub process, streaming (decoupled).

Copied by stacks/triton.py into a model repository generated per deployment as `<model>/1/model.py`, beside
`engine.json` (the engine settings, exactly the bare vLLM baseline's). Runs inside Triton's Python stub, in the
Triton environment (not layerbench's), so it imports nothing of layerbench.

Inputs as in NVIDIA's vLLM backend: `text_input`, `stream`, `sampling_parameters` (a JSON string),
`exclude_input_in_output`. Every response carries `num_output_tokens`, the tokens the engine produced for that
response, and the first one `num_input_tokens`, so a client takes token counts from the server and never from
counting events. With `report_engine_metrics` the engine's counters, gauges and histograms are published
under their `vllm:*` names through Triton's custom-metric API on Triton's metrics port (off by default, like
NVIDIA's backend); the engine's own Prometheus registry lives in this process and no server exposes it.
At start-up the applied engine settings and the vLLM version are written to `applied.json` next to this file.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.metrics.loggers import StatLoggerBase

SECONDS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
           80.0]
TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]


class TritonStatLogger(StatLoggerBase):
    """vLLM's stats -> Triton custom metrics, named as vLLM names them (labels: model, version)."""

    def __init__(self, vllm_config, engine_index: int = 0, labels: dict[str, str] | None = None):
        self.labels = labels or {}
        F = pb_utils.MetricFamily
        self._families = []  # a family must outlive its metrics

        def metric(name: str, kind, doc: str, buckets: list | None = None, extra: dict | None = None):
            fam = F(name=name, description=doc, kind=kind)
            self._families.append(fam)
            labels = {**self.labels, **(extra or {})}
            return fam.Metric(labels=labels, buckets=buckets) if buckets else fam.Metric(labels=labels)

        self.prompt = metric("vllm:prompt_tokens_total", F.COUNTER, "Prefill tokens processed.")
        self.generation = metric("vllm:generation_tokens_total", F.COUNTER, "Generation tokens processed.")
        self.preemptions = metric("vllm:num_preemptions_total", F.COUNTER, "Cumulative preemptions.")
        self.cache_queries = metric("vllm:prefix_cache_queries_total", F.COUNTER, "Prefix-cache queries (tokens).")
        self.cache_hits = metric("vllm:prefix_cache_hits_total", F.COUNTER, "Prefix-cache hits (tokens).")
        self.success = metric("vllm:request_success_total", F.COUNTER, "Finished requests.")
        self.running = metric("vllm:num_requests_running", F.GAUGE, "Requests in model execution batches.")
        self.waiting = metric("vllm:num_requests_waiting", F.GAUGE, "Requests waiting to be processed.")
        self.kv_usage = metric("vllm:kv_cache_usage_perc", F.GAUGE, "KV-cache usage, 1 = full.")
        H = F.HISTOGRAM
        self.ttft = metric("vllm:time_to_first_token_seconds", H, "Time to first token.", SECONDS)
        self.itl = metric("vllm:inter_token_latency_seconds", H, "Inter-token latency.", SECONDS)
        self.e2e = metric("vllm:e2e_request_latency_seconds", H, "End-to-end request latency.", SECONDS)
        self.queue = metric("vllm:request_queue_time_seconds", H, "Time in the WAITING phase.", SECONDS)
        self.prefill = metric("vllm:request_prefill_time_seconds", H, "Time in the PREFILL phase.", SECONDS)
        self.decode = metric("vllm:request_decode_time_seconds", H, "Time in the DECODE phase.", SECONDS)
        self.tpot = metric("vllm:request_time_per_output_token_seconds", H, "Time per output token.", SECONDS)
        self.req_prompt = metric("vllm:request_prompt_tokens", H, "Prompt tokens per request.", TOKENS)
        self.req_gen = metric("vllm:request_generation_tokens", H, "Generation tokens per request.", TOKENS)

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
        if scheduler_stats is not None:
            self.running.set(scheduler_stats.num_running_reqs)
            self.waiting.set(scheduler_stats.num_waiting_reqs)
            self.kv_usage.set(scheduler_stats.kv_cache_usage)
            self.cache_queries.increment(scheduler_stats.prefix_cache_stats.queries)
            self.cache_hits.increment(scheduler_stats.prefix_cache_stats.hits)
        if iteration_stats is None:
            return
        self.prompt.increment(iteration_stats.num_prompt_tokens)
        self.generation.increment(iteration_stats.num_generation_tokens)
        self.preemptions.increment(iteration_stats.num_preempted_reqs)
        for t in iteration_stats.time_to_first_tokens_iter:
            self.ttft.observe(t)
        for t in iteration_stats.inter_token_latencies_iter:
            self.itl.observe(t)
        for fin in iteration_stats.finished_requests:
            self.success.increment(1)
            self.e2e.observe(fin.e2e_latency)
            self.queue.observe(fin.queued_time)
            self.prefill.observe(fin.prefill_time)
            self.decode.observe(fin.decode_time)
            self.tpot.observe(fin.mean_time_per_output_token)
            self.req_prompt.observe(fin.num_prompt_tokens)
            self.req_gen.observe(fin.num_generation_tokens)

    def log_engine_initialized(self) -> None:
        pass


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        here = Path(args["model_repository"]) / args["model_version"]
        spec = json.loads((here / "engine.json").read_text())
        self.model_name = args["model_name"]
        loggers = None
        if spec.pop("report_engine_metrics", False):
            labels = {"model": self.model_name, "version": args["model_version"]}
            loggers = [lambda cfg, idx=0: TritonStatLogger(cfg, idx, labels)]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-engine-loop", daemon=True)
        self.thread.start()
        engine_args = AsyncEngineArgs(**spec)
        self.engine = asyncio.run_coroutine_threadsafe(self._start(engine_args, loggers), self.loop).result()
        cfg = self.engine.vllm_config
        import vllm

        (here / "applied.json").write_text(json.dumps({
            "vllm_version": vllm.__version__, "max_model_len": cfg.model_config.max_model_len,
            "max_num_seqs": cfg.scheduler_config.max_num_seqs, "dtype": str(cfg.model_config.dtype),
            "enforce_eager": cfg.model_config.enforce_eager,
            "enable_prefix_caching": cfg.cache_config.enable_prefix_caching}))
        self.counter = 0

    async def _start(self, engine_args: AsyncEngineArgs, loggers) -> AsyncLLM:
        return AsyncLLM.from_engine_args(engine_args, stat_loggers=loggers)

    def execute(self, requests: list) -> None:
        for request in requests:  # decoupled: answer through each request's sender, from the engine's loop
            self.counter += 1
            asyncio.run_coroutine_threadsafe(self._generate(request, f"triton-{self.counter}"), self.loop)
        return None

    async def _generate(self, request, request_id: str) -> None:
        sender = request.get_response_sender()
        try:
            prompt = _scalar(request, "text_input").decode()
            stream = bool(_scalar(request, "stream", False))
            exclude_input = bool(_scalar(request, "exclude_input_in_output", False))
            params = json.loads(_scalar(request, "sampling_parameters", b"{}") or b"{}")
            params["output_kind"] = RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY
            sampling = SamplingParams(**params)
        except (ValueError, TypeError, AttributeError) as e:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"bad request: {e}")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        first, final_sent = True, False
        try:
            async for out in self.engine.generate(prompt, sampling, request_id):
                if sender.is_cancelled():  # the client went away: stop generating, as vLLM's server does
                    await self.engine.abort(request_id)
                    break
                completion = out.outputs[0]
                text = completion.text
                if first and not exclude_input and not stream:
                    text = prompt + text
                tensors = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
                           pb_utils.Tensor("num_output_tokens",
                                           np.array([len(completion.token_ids)], dtype=np.uint32))]
                if first:
                    n_in = len(out.prompt_token_ids or ())
                    tensors.append(pb_utils.Tensor("num_input_tokens", np.array([n_in], dtype=np.uint32)))
                first = False
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if out.finished else 0
                sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=flags)
                final_sent = out.finished
        except Exception as e:  # the request ends with the engine's error, the model keeps serving
            await self.engine.abort(request_id)
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(e).__name__}: {e}")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            final_sent = True
        finally:
            if not final_sent:  # every request ends with a final flag, or Triton holds its stream open
                try:
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                except Exception as e:  # the stream is already closed: nothing left to end
                    print(f"layerbench model: could not end {request_id}: {e}", flush=True)

    def finalize(self) -> None:
        self.engine.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def _scalar(request, name: str, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]
