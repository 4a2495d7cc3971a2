"""LiteLLM's proxy (`litellm[proxy]`, from scripts/setup_litellm.sh into .venv-litellm) in front of a bare vLLM: the
gateway most deployed in front of vLLM. Its config names one model, the served one, as `openai/<name>` at the
bare vLLM's `/v1`: the `openai` provider sends completions to vLLM's own `/v1/completions` (any other provider
would turn a prompt into chat messages) and passes vLLM's extra fields (`ignore_eos`) through. No database, no
master key, the admin UI off and the model cost map read from the package, so it starts with no network.

Its own `/metrics` (its `prometheus` callback: `litellm_*` request, latency and token families) is on its port;
the engine's `vllm:*` families stay on the bare vLLM's port behind it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from stacks.base import PROJECT_ROOT, Stack, StackOptions, register
from stacks.base.fronted import FrontedEngineStack

LITELLM_VENV = PROJECT_ROOT / ".venv-litellm"
PORT = 4000  # in a pod
IMAGE = "ghcr.io/berriai/litellm:main-v1.108.7"  # the version the local stack pins


class LitellmOptions(StackOptions):
    num_workers: int = Field(1, ge=1, le=16, description="LiteLLM's worker processes (its --num_workers; default 1)")
    image: str | None = Field(None, min_length=1,
                              description=f"k8s target: the layer's image (default {IMAGE}, the version pinned here)")


@register
class LitellmStack(FrontedEngineStack):
    kind = "litellm"
    description = "LiteLLM's proxy (litellm[proxy] 1.108.7) in front of bare vLLM"
    server_name = "LiteLLM"
    front_role = "LiteLLM proxy"
    Options = LitellmOptions
    options: LitellmOptions
    k8s_form = "stacks.litellm:render_k8s"
    exposure_hint = "LiteLLM listens on --host 127.0.0.1 only"

    def config(self, upstream: str) -> dict[str, Any]:
        name = self.settings.served_model_name
        return {"model_list": [{"model_name": name, "litellm_params": {
                    "model": f"openai/{name}", "api_base": f"{upstream}/v1", "api_key": "unused"}}],
                "litellm_settings": {"callbacks": ["prometheus"], "require_auth_for_metrics_endpoint": False,
                                     "num_retries": 0, "request_timeout": 600}}

    def front_command(self, upstream: str) -> tuple[list[str], dict[str, str]]:
        exe = LITELLM_VENV / "bin" / "litellm"
        if not exe.exists():
            from harness.errors import LayerbenchError

            raise LayerbenchError(f"LiteLLM is not installed ({exe} missing): run `make setup-litellm`")
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.settings.log_dir / f"litellm-{self.port}.yaml"
        path.write_text(json.dumps(self.config(upstream), indent=2))  # JSON is YAML
        return ([str(exe), "--config", str(path), "--host", "127.0.0.1", "--port", str(self.port), "--num_workers",
                 str(self.options.num_workers)], FRONT_ENV)

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


def render_k8s(stack: Stack, cs: Any, run_id: str, label: str) -> Any:
    """The bare vLLM (its Deployment and Service) and LiteLLM's Deployment and Service in front of it, its config
    in a ConfigMap (manifests/litellm/)."""
    from harness.targets.k8s.common import (
        Deployed,
        container_security,
        labels,
        metadata,
        object_name,
        resources,
        service_url,
        template,
    )
    from harness.targets.k8s.render_vllm import render_vllm

    engine = render_vllm(stack, cs, run_id, label)
    name = object_name(run_id, label, "litellm")
    mine = labels(run_id, label, "layer")
    assert isinstance(stack, LitellmStack)
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(f"{name}-config", cs.namespace, mine),
              "data": {"config.yaml": json.dumps(stack.config(engine.url), indent=2)}}
    dep = template("litellm/deployment.yaml", name=name, namespace=cs.namespace, image=stack.options.image or IMAGE,
                   configmap=f"{name}-config", port=PORT, workers=stack.options.num_workers)
    dep["metadata"]["labels"] = dep["spec"]["selector"]["matchLabels"] = mine
    dep["spec"]["replicas"] = cs.replicas
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"] = mine
    pod["spec"]["containers"][0].update(resources=resources(cs.front_cpu, cs.front_memory),
                                        securityContext=container_security())
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in FRONT_ENV.items()]
    svc = template("litellm/service.yaml", name=name, namespace=cs.namespace, port=PORT)
    svc["metadata"]["labels"], svc["spec"]["selector"] = mine, dict(mine)
    url = service_url(name, cs.namespace, PORT)
    return Deployed(objects=[*engine.objects, config, dep, svc], ready=[*engine.ready, ("Deployment", name)], url=url,
                    engine_selector=engine.engine_selector, metrics={"api": f"{url}/metrics/",
                                                                     "engine": engine.metrics["api"]},
                    engine_images=engine.engine_images)
