"""`/metrics` for the reference engine with the real vLLM 0.32.0 family names and types (the 39 `vllm:*`
families listed in shared/notes/vllm-0.32.0-metric-families.txt), labelled {engine, model_name} like vLLM.
The families the simulation drives follow its state; the rest exist with zero values, so the observability
audit sees exactly what a real vLLM 0.32.0 exposes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

VLLM_0_32_FAMILIES: dict[str, str] = {
    "vllm:admission_rejections_total": "counter", "vllm:cache_config_info": "gauge",
    "vllm:e2e_request_latency_seconds": "histogram", "vllm:engine_sleep_state": "gauge",
    "vllm:estimated_flops_per_gpu_total": "counter", "vllm:estimated_read_bytes_per_gpu_total": "counter",
    "vllm:estimated_write_bytes_per_gpu_total": "counter", "vllm:external_prefix_cache_hits_total": "counter",
    "vllm:external_prefix_cache_queries_total": "counter", "vllm:generation_tokens_total": "counter",
    "vllm:inter_token_latency_seconds": "histogram", "vllm:iteration_tokens_total": "histogram",
    "vllm:kv_cache_usage_perc": "gauge", "vllm:mm_cache_hits_total": "counter",
    "vllm:mm_cache_queries_total": "counter", "vllm:num_preemptions_total": "counter",
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_waiting_by_reason": "gauge", "vllm:prefix_cache_hits_total": "counter",
    "vllm:prefix_cache_queries_total": "counter", "vllm:prompt_tokens_by_source_total": "counter",
    "vllm:prompt_tokens_cached_by_source_total": "counter", "vllm:prompt_tokens_cached_total": "counter",
    "vllm:prompt_tokens_total": "counter", "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_generation_tokens": "histogram", "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram", "vllm:request_num_preemptions": "histogram",
    "vllm:request_params_max_tokens": "histogram", "vllm:request_params_n": "histogram",
    "vllm:request_prefill_kv_computed_tokens": "histogram", "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram", "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_success_total": "counter", "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
}
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0)
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


class SimMetrics:
    def __init__(self, model_name: str, kv_capacity_tokens: int):
        self.registry = CollectorRegistry()
        self.labels = {"engine": "0", "model_name": model_name}
        self.kv_capacity = kv_capacity_tokens
        self.m: dict[str, Counter | Gauge | Histogram] = {}
        extra = {"vllm:num_requests_waiting_by_reason": ["reason"], "vllm:engine_sleep_state": ["sleep_state"],
                 "vllm:request_success_total": ["finished_reason"],
                 "vllm:prompt_tokens_by_source_total": ["source"],
                 "vllm:prompt_tokens_cached_by_source_total": ["source"]}
        for name, kind in VLLM_0_32_FAMILIES.items():
            labelnames = ["engine", "model_name", *extra.get(name, [])]
            # prometheus_client appends _total to counters itself
            base = name[: -len("_total")] if kind == "counter" else name
            if kind == "counter":
                self.m[name] = Counter(base, name, labelnames, registry=self.registry)
            elif kind == "gauge":
                self.m[name] = Gauge(base, name, labelnames, registry=self.registry)
            else:
                buckets = _TOKEN_BUCKETS if "tokens" in name or name.endswith("_n") else _LATENCY_BUCKETS
                self.m[name] = Histogram(base, name, labelnames, buckets=buckets, registry=self.registry)
            if not extra.get(name):
                self.m[name].labels(**self.labels)  # expose the series at zero, as vLLM does
        self.m["vllm:request_success_total"].labels(**self.labels, finished_reason="length")
        self.m["vllm:engine_sleep_state"].labels(**self.labels, sleep_state="awake").set(1)

    def _l(self, name: str, **more):
        return self.m[name].labels(**self.labels, **more)

    def set_state(self, running: int, waiting: int, kv_tokens: int) -> None:
        self._l("vllm:num_requests_running").set(running)
        self._l("vllm:num_requests_waiting").set(waiting)
        self._l("vllm:kv_cache_usage_perc").set(min(1.0, kv_tokens / self.kv_capacity))

    def on_admit(self, prompt_tokens: int, max_tokens: int, queued_s: float, cached_tokens: int,
                 block_tokens: int) -> None:
        self._l("vllm:prompt_tokens_total").inc(prompt_tokens)
        self._l("vllm:prompt_tokens_cached_total").inc(cached_tokens)
        self._l("vllm:prefix_cache_queries_total").inc(block_tokens)
        self._l("vllm:prefix_cache_hits_total").inc(cached_tokens)
        self._l("vllm:request_prompt_tokens").observe(prompt_tokens)
        self._l("vllm:request_params_max_tokens").observe(max_tokens)
        self._l("vllm:request_params_n").observe(1)
        self._l("vllm:request_queue_time_seconds").observe(queued_s)

    def on_first_token(self, ttft_s: float) -> None:
        self._l("vllm:time_to_first_token_seconds").observe(ttft_s)

    def on_token(self, n: int, gap_s: float | None) -> None:
        self._l("vllm:generation_tokens_total").inc(n)
        if gap_s is not None:
            self._l("vllm:inter_token_latency_seconds").observe(gap_s)

    def on_finish(self, e2e_s: float, tokens: int, tpot_s: float | None) -> None:
        self._l("vllm:e2e_request_latency_seconds").observe(e2e_s)
        self._l("vllm:request_generation_tokens").observe(tokens)
        self._l("vllm:request_success_total", finished_reason="length").inc()
        if tpot_s is not None:
            self._l("vllm:request_time_per_output_token_seconds").observe(tpot_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
