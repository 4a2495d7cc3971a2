"""The SGLang Model Gateway (`smg` 1.13.0, a Rust router run in-process by its Python CLI, `smg launch`; from
scripts/setup_smg.sh into .venv-smg) as an HTTP router in front of bare vLLM: one worker, or `engine.replicas` of
them. It streams the engine's SSE answer through; its routing policy is an option. Retries and the circuit breaker
are off, so a failed request is counted as one instead of being retried out of sight.

What it does to a request, as measured against smg 1.13.0 (a capturing worker behind it):
- with retries off, a policy that does not read the prompt (round_robin, random, power_of_two, least_load,
  prefix_hash) forwards the body verbatim, streamed, so the engine gets it chunked (Transfer-Encoding: chunked, no
  Content-Length): its `--max-buffered-request-bytes` help, "otherwise stream to the worker verbatim";
- cache_aware reads the prompt (its metric `smg_router_request_body_path_total{reason="policy_needs_text"}`): it
  parses the body and sends its own serialization of it, every field kept, `echo` / `logprobs` false added.
The wheel carries no Rust source: the paths below named model_gateway/ are smg's repository (smg-project/smg) at
f8daa88 (2026-08, after v1.9.0), each one checked against 1.13.0's behaviour. It finds out what a worker is at
registration: `GET /v1/models` (owned_by "vllm"), else `GET /version` means vLLM
(model_gateway/src/workflow/steps/local/detect_backend.rs; 1.13.0 registers the reference engine, owned_by
"layerbench-sim", as runtime_type vllm); over HTTP it loads no tokenizer (steps/local/submit_tokenizer_job.rs: "HTTP
mode ... doesn't consult the tokenizer registry"), so cache_aware routes on the prompt's text.

Kept at smg's defaults, as its users get them (`smg launch --help`, 1.13.0): it polls every engine's /metrics for
load every 10 s (--load-monitor-interval; "By default every worker group is polled", --disable-load-monitoring);
worker overload protection is on (a worker with 8 waiting requests or 0.8 KV usage is left out while another is
under, --disable-worker-overload-protection); at most 4096 requests in flight on this host (--max-concurrent-requests
-1: "1024 per available core, at least 4096"); a silent SSE stream gets a keep-alive comment after 15 s
(--sse-keepalive-secs).

On SIGTERM it keeps listening 5 s before it stops (its log: "Keeping listener open during load-balancer propagation
window settle_secs=5"; the launcher does not expose that setting, smg/router_args.py), so each teardown takes 5 s.

Its Prometheus metrics (`smg_*`) are on a port of their own; its serving port answers /metrics with 404, and the
engine's `vllm:*` families stay on the bare vLLM's port behind it."""

from __future__ import annotations

import time
from typing import Literal

import httpx
from pydantic import Field
from rich.console import Console

from harness.errors import LayerbenchError
from harness.schemas import LayerMetric
from stacks.base import PROJECT_ROOT, StackOptions, register
from stacks.base.replicas import ReplicaSet
from stacks.base.router import WorkerRouterStack

SMG_VENV = PROJECT_ROOT / ".venv-smg"
# In a pod: smg's own defaults, 30000 to serve and 29000 for metrics (`smg launch --help`, 1.13.0; its image runs as a
# non-root user "SMG only binds to unprivileged ports 30000/29000": docker/Dockerfile in smg-project/smg)
PORT, METRICS_PORT = 30000, 29000
# The image of the version the local stack pins: smg-project/smg's .github/workflows/release-docker.yml pushes
# lightseekorg/smg:<the version in bindings/python/pyproject.toml>, with no leading "v", at each version bump
IMAGE = "lightseekorg/smg:1.13.0"


class SmgOptions(StackOptions):
    # smg 1.13.0's --policy choices (smg/router_args.py, COMMON_POLICY_CHOICES): random, round_robin, passthrough,
    # cache_aware, power_of_two, least_load, manual, consistent_hashing, prefix_hash. Left out: manual and
    # consistent_hashing route on a client's X-SMG-Routing-Key header, which the load client does not send (without
    # it consistent_hashing picks at random: model_gateway/src/policies/consistent_hashing.rs, RandomFallback);
    # passthrough is for the external (cloud API) workers. power_of_two and least_load read the engines' vllm:*
    # gauges (model_gateway/src/worker/monitor.rs, fetch_http_load_vllm); power_of_two needs two workers (smg refuses
    # one: "Power-of-two policy requires at least 2 workers", 1.13.0's startup error; config/validation.rs)
    policy: Literal["cache_aware", "round_robin", "random", "power_of_two", "least_load", "prefix_hash"] = Field(
        "cache_aware", description="the gateway's policy (its --policy; cache_aware is its own default)")
    image: str | None = Field(None, min_length=1,
                              description=f"k8s target: the layer's image (default {IMAGE}, the version pinned here)")


@register
class SmgStack(WorkerRouterStack):
    kind = "smg"
    description = "the SGLang Model Gateway (smg 1.13.0), an HTTP router in front of bare vLLM"
    server_name = "smg"
    front_role = "smg"
    Options = SmgOptions
    options: SmgOptions
    k8s_form = "harness.targets.k8s.render_smg:render_k8s"
    exposure_hint = "smg's serving and metrics ports bind 127.0.0.1 only (its --host and --prometheus-host)"

    def args(self, upstreams: list[str], host: str, port: int, metrics_port: int) -> list[str]:
        # smg 1.13.0, `smg launch --help`: --host defaults to 0.0.0.0 and --prometheus-host to "the unspecified
        # address of --host's family", so both are set; --worker-urls takes every worker after one flag (nargs="*");
        # --disable-retries and --disable-circuit-breaker; --worker-startup-check-interval (30 s by default) is how
        # often it asks an engine that is still starting. No --backend: its default (sglang) serves HTTP workers of
        # any engine, and `openai` is the proxy to a cloud API
        return ["launch", "--host", host, "--port", str(port), "--worker-urls", *upstreams,
                "--policy", self.options.policy, "--prometheus-host", host, "--prometheus-port", str(metrics_port),
                "--worker-startup-check-interval", "1", "--disable-retries", "--disable-circuit-breaker"]

    def front_command(self, upstream: str) -> tuple[list[str], dict[str, str]]:
        return self.front_commands([upstream])

    def front_commands(self, upstreams: list[str]) -> tuple[list[str], dict[str, str]]:
        exe = SMG_VENV / "bin" / "smg"  # smg.cli:main (its entry point); the router runs in this process
        if not exe.exists():
            raise LayerbenchError(f"smg is not installed ({exe} missing): run `make setup-smg`")
        return [str(exe), *self.args(upstreams, "127.0.0.1", self.port, self.metrics_port)], {}

    def ready_url(self) -> str:
        # /health and /liveness answer 200 while the process lives; /readiness once a worker is healthy
        # (model_gateway/src/health.rs, readiness_response)
        return f"{self.endpoint().base_url}/readiness"

    def wait_ready(self, timeout: float, console: Console | None = None) -> float:
        """Ready once every engine is a healthy worker: smg registers them in the background after it listens, and
        its /readiness says ready at the first (its body counts them: {"healthy_workers": N, ...})."""
        waited = super().wait_ready(timeout, console)
        want = len(self.engine.replicas) if isinstance(self.engine, ReplicaSet) else 1
        t0 = time.monotonic()
        while (healthy := self.healthy_workers()) < want:
            if reason := self.dead():
                raise LayerbenchError(f"smg exited while registering its workers: {reason}")
            if waited + time.monotonic() - t0 > timeout:
                raise LayerbenchError(f"smg has {healthy} of its {want} workers healthy after {timeout:.0f}s: "
                                      f"see {self.log_path}")
            time.sleep(0.1)
        return waited + time.monotonic() - t0

    def healthy_workers(self) -> int:
        try:
            return int(httpx.get(self.ready_url(), timeout=2).json().get("healthy_workers", 0))
        except (httpx.HTTPError, ValueError):  # not ready (503, no count) or gone: dead() says which
            return 0

    def metric_endpoints(self) -> dict[str, str]:
        engines = {k: v for k, v in super().metric_endpoints().items() if k != "api"}  # engine, or engine@0, ...
        return {"smg_metrics": f"http://127.0.0.1:{self.metrics_port}/metrics", **engines}

    def metricless_endpoints(self) -> dict[str, str]:
        return {"api": f"{self.endpoint().base_url}/metrics"}  # its serving port: the metrics are on their own

    def layer_metrics(self) -> tuple[LayerMetric, ...]:
        # smg_router_request_duration_seconds: "Router request duration by router_type, backend_type,
        # connection_mode, model, endpoint" (model_gateway/src/observability/metrics.rs). Measured against 1.13.0 it
        # is observed once per request, when the engine's response headers are back, not at the stream's end (sub-ms
        # for answers that streamed 60 ms): a time to headers, so no span of the request
        d = "smg_router_request_duration_seconds"
        return (LayerMetric(key="smg s/request to headers", family=f"{d}_sum", how="per", per=f"{d}_count",
                            note="seconds from the gateway's taking a request to the engine's response headers "
                            "(routing, the hop and the engine's start); the stream after them is not in it"),)

    def describe(self) -> dict:
        return {**super().describe(), "policy": self.options.policy, "metrics_port": self.metrics_port}
