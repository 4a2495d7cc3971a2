"""LiteLLM's proxy (`litellm[proxy]`, from scripts/setup_litellm.sh into .venv-litellm) in front of a bare vLLM, or of
`engine.replicas` of them: the gateway most deployed in front of vLLM. Its config names one model, the served one,
as `openai/<name>` at each bare vLLM's `/v1` (one deployment of the model per engine, spread by its
`routing_strategy`): the `openai` provider sends completions to vLLM's own `/v1/completions` (any other provider
would turn a prompt into chat messages) and passes vLLM's extra fields (`ignore_eos`) through. No database, no
master key, the admin UI off and the model cost map read from the package, so it starts with no network.

Its own `/metrics` (its `prometheus` callback: `litellm_*` request, latency and token families) is on its port;
the engine's `vllm:*` families stay on the bare vLLM's port behind it."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from stacks.base import PROJECT_ROOT, StackOptions, register
from stacks.base.fronted import FrontedEngineStack

LITELLM_VENV = PROJECT_ROOT / ".venv-litellm"
PORT = 4000  # in a pod
IMAGE = "ghcr.io/berriai/litellm:main-v1.108.7"  # the version the local stack pins


# litellm/router_utils/routing_groups.py (1.108.7): VALID_ROUTING_STRATEGIES = ("simple-shuffle", "lar1",
# *RoutingStrategy) and litellm/types/router.py's RoutingStrategy; any other value is refused there. Not offered:
# the budget and cost strategies, which need spend data a benchmark has none of
STRATEGIES = Literal["simple-shuffle", "least-busy", "latency-based-routing", "usage-based-routing-v2"]


class LitellmOptions(StackOptions):
    num_workers: int = Field(1, ge=1, le=16, description="LiteLLM's worker processes (its --num_workers; default 1)")
    routing_strategy: STRATEGIES = Field(  # type: ignore[valid-type]
        "simple-shuffle", description="how LiteLLM picks one of the engines (engine.replicas above 1): its "
        "router_settings.routing_strategy; simple-shuffle is its default (litellm/router.py)")
    image: str | None = Field(None, min_length=1,
                              description=f"k8s target: the layer's image (default {IMAGE}, the version pinned here)")


@register
class LitellmStack(FrontedEngineStack):
    kind = "litellm"
    description = "LiteLLM's proxy (litellm[proxy] 1.108.7) in front of bare vLLM"
    server_name = "LiteLLM"
    front_role = "LiteLLM proxy"
    replicas_by = "layer"  # one model_list entry per engine, one model_name
    Options = LitellmOptions
    options: LitellmOptions
    k8s_form = "harness.targets.k8s.render_litellm:render_k8s"
    exposure_hint = "LiteLLM listens on --host 127.0.0.1 only"

    def config(self, upstream: str | list[str]) -> dict[str, Any]:
        """N engines are N deployments of one model_name, each with its own api_base: LiteLLM's own way to load
        balance instances of one model (docs.litellm.ai/docs/proxy/load_balancing)."""
        name = self.settings.served_model_name
        upstreams = [upstream] if isinstance(upstream, str) else upstream
        routing = {"router_settings": {"routing_strategy": self.options.routing_strategy}} if len(upstreams) > 1 \
            else {}
        return {"model_list": [{"model_name": name, "litellm_params": {
                    "model": f"openai/{name}", "api_base": f"{u}/v1", "api_key": "unused"}} for u in upstreams],
                "litellm_settings": {"callbacks": ["prometheus"], "require_auth_for_metrics_endpoint": False,
                                     "num_retries": 0, "request_timeout": 600}, **routing}

    def front_command(self, upstream: str) -> tuple[list[str], dict[str, str]]:
        return self.front_commands([upstream])

    def front_commands(self, upstreams: list[str]) -> tuple[list[str], dict[str, str]]:
        exe = LITELLM_VENV / "bin" / "litellm"
        if not exe.exists():
            from harness.errors import LayerbenchError

            raise LayerbenchError(f"LiteLLM is not installed ({exe} missing): run `make setup-litellm`")
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.settings.log_dir / f"litellm-{self.port}.yaml"
        path.write_text(json.dumps(self.config(upstreams), indent=2))  # JSON is YAML
        return ([str(exe), "--config", str(path), "--host", "127.0.0.1", "--port", str(self.port), "--num_workers",
                 str(self.options.num_workers)], FRONT_ENV)

    def layer_headers(self) -> dict[str, str]:
        # litellm/proxy/common_request_processing.py (1.108.7), get_custom_headers: in a response's head, and left
        # out where its value is still "None" (exclude_values, :2026), as it is for every stream here (the head goes
        # before the overhead is known: no streamed request of a make diagnose kept it, 2026-12-03)
        return {"x-litellm-overhead-duration-ms": "LiteLLM's own time on the request, outside the upstream call "
                "(its litellm_overhead_time_ms)"}

    def tuning(self) -> dict[str, str]:
        # one proxy process per worker, each its own core: requests queue in one worker's event loop
        return {"saturated process": "num_workers=1,2,4", "queueing in the layer": "num_workers=1,2,4"}

    def ready_url(self) -> str:
        return f"{self.endpoint().base_url}/health/readiness"

    def metric_endpoints(self) -> dict[str, str]:
        # its Prometheus app is mounted at /metrics/; /metrics answers with a 307 to it
        ends = super().metric_endpoints()
        return {**ends, "api": ends["api"] + "/"}


# no database, no admin UI, the cost map from the package, no telemetry: it starts offline. No master key either
# (1.108 refuses to start without one unless told): the proxy listens on loopback only, and the client sends no
# key. A gateway deployed with a master key also checks it on every request, which this compare leaves out.
FRONT_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "DISABLE_ADMIN_UI": "True", "LITELLM_TELEMETRY": "False",
             "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true", "LITELLM_LOG": "ERROR",
             "PYTHONUNBUFFERED": "1"}
