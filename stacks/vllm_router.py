"""vLLM's router (`vllm-router`, the vLLM project's Rust load balancer, from scripts/setup_vllm-router.sh into
.venv-vllm-router) in front of bare vLLM: one worker, or `engine.replicas` of them. It passes the engine's SSE
stream through byte for byte; its routing policy is an option. Retries and the circuit breaker are off, so a failed
request is counted as one instead of being retried out of sight.

Its Prometheus metrics (`vllm_router_*`) are on a port of their own; its serving port has no `/metrics`, and the
engine's `vllm:*` families stay on the bare vLLM's port behind it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.schemas import LayerMetric
from stacks.base import PROJECT_ROOT, StackOptions, register
from stacks.base.router import WorkerRouterStack

ROUTER_VENV = PROJECT_ROOT / ".venv-vllm-router"
PORT, METRICS_PORT = 8080, 29000  # in a pod
IMAGE = "vllm/vllm-router:v0.1.17"  # the version the local stack pins


class RouterOptions(StackOptions):
    # vllm-router 0.1.17's --policy choices (vllm_router/router_args.py, its `choices`): random, round_robin,
    # cache_aware, kv_aware, power_of_two, consistent_hash, sticky_least_loaded. kv_aware needs the engines' KV events
    # (its --kv-event-* flags), which layerbench does not wire; power_of_two needs two workers (its
    # docs/cli_reference.md, "Routing policies"): refused in front of one engine
    policy: Literal["cache_aware", "round_robin", "random", "consistent_hash", "sticky_least_loaded",
                    "power_of_two"] = Field(
        "cache_aware", description="the router's policy (its --policy; cache_aware is its own default)")
    image: str | None = Field(None, min_length=1,
                              description=f"k8s target: the layer's image (default {IMAGE}, the version pinned here)")


@register
class VllmRouterStack(WorkerRouterStack):
    kind = "vllm-router"
    description = "vLLM's Rust router (vllm-router 0.1.17) in front of bare vLLM"
    server_name = "vllm-router"
    front_role = "vllm-router"
    Options = RouterOptions
    options: RouterOptions
    k8s_form = "harness.targets.k8s.render_vllm_router:render_k8s"

    @classmethod
    def engine_flags(cls, options: RouterOptions) -> tuple[str, ...]:  # type: ignore[override]
        # cache_aware routes on token ids, which vllm-router 0.1.17 asks each http worker for at
        # POST /v1/completions/render (/v1/chat/completions/render for chat); vLLM 0.32 answers those 403 unless
        # started with --enable-scale-out (vllm/entrypoints/scale_out/factories.py; the flag only registers the
        # render, derender and token-in/out endpoints: launchers/cli_args.py). Without it every decision falls
        # back to the least-loaded worker, counted as vllm_router_prefix_routing_decisions_total{outcome=
        # missing_tokens}: measured here, all 64 requests of c=1 on one worker and hits no better than in turn
        return ("--enable-scale-out",) if options.policy == "cache_aware" else ()

    def args(self, upstreams: list[str], host: str, port: int, metrics_port: int) -> list[str]:
        # --worker-urls takes every worker after one flag (nargs="*" in vllm_router/router_args.py, 0.1.17): a
        # repeated flag would keep only its last list
        return ["--host", host, "--port", str(port), "--worker-urls", *upstreams, "--policy", self.options.policy,
                "--prometheus-host", host, "--prometheus-port", str(metrics_port), "--log-level", "info",
                "--worker-startup-check-interval", "1", "--disable-retries", "--disable-circuit-breaker"]

    def front_command(self, upstream: str) -> tuple[list[str], dict[str, str]]:
        return self.front_commands([upstream])

    def front_commands(self, upstreams: list[str]) -> tuple[list[str], dict[str, str]]:
        exe = ROUTER_VENV / "bin" / "vllm-router"
        if not exe.exists():
            from harness.errors import LayerbenchError

            raise LayerbenchError(f"vllm-router is not installed ({exe} missing): run `make setup-vllm-router`")
        return [str(exe), *self.args(upstreams, "127.0.0.1", self.port, self.metrics_port)], {}

    def ready_url(self) -> str:
        return f"{self.endpoint().base_url}/health"

    def metric_endpoints(self) -> dict[str, str]:
        engines = {k: v for k, v in super().metric_endpoints().items() if k != "api"}  # engine, or engine@0, ...
        return {"router_metrics": f"http://127.0.0.1:{self.metrics_port}/metrics", **engines}

    def layer_metrics(self) -> tuple[LayerMetric, ...]:
        # vllm_router_request_duration_seconds: a histogram by `route`, "End-to-end request latency" (vllm-router's
        # own metrics reference, docs: Prometheus Metrics Reference); the completions alone, not /v1/models
        d = "vllm_router_request_duration_seconds"
        return (LayerMetric(key="router ms/request", family=f"{d}_sum", how="per", per=f"{d}_count", span_ms=1e3,
                            match=("completions",), note="the router's own end-to-end time of a request, by its "
                            "route; where it stops the clock before the stream ends, the hop below it reads negative"),
                # a prefix policy's decisions made without token ids (the engines' render endpoint refused or
                # absent): each fell back to the least-loaded worker (vllm-router 0.1.17's own counter)
                LayerMetric(key="routed without tokens", family="vllm_router_prefix_routing_decisions_total",
                            match=("missing_tokens",), note="decisions of a prefix policy made without the "
                            "prompt's token ids, each sent to the least-loaded worker instead: above 0, the "
                            "policy did not route by prefix"))

    def metricless_endpoints(self) -> dict[str, str]:
        return {"api": f"{self.endpoint().base_url}/metrics"}  # its serving port: the metrics are on their own

    def describe(self) -> dict:
        return {**super().describe(), "policy": self.options.policy, "metrics_port": self.metrics_port}
