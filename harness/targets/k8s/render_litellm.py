"""The litellm stack's cluster form: named by the adapter's `k8s_form` (stacks/litellm.py)."""

from __future__ import annotations

import json
from typing import Any

from stacks.base import Stack
from stacks.litellm import FRONT_ENV, IMAGE, PORT, LitellmStack


def render_k8s(stack: Stack, cs: Any, run_id: str, label: str) -> Any:
    """The bare vLLM engines (a Deployment and Service each, engine.replicas of them) and LiteLLM's Deployment and
    Service in front of them, its config in a ConfigMap (manifests/litellm/): one model_list entry per engine."""
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
    from harness.targets.k8s.engines import engine_metrics, engine_urls
    from harness.targets.k8s.render_vllm import render_vllm

    engine = render_vllm(stack, cs, run_id, label)
    name = object_name(run_id, label, "litellm")
    mine = labels(run_id, label, "layer")
    assert isinstance(stack, LitellmStack)
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(f"{name}-config", cs.namespace, mine),
              "data": {"config.yaml": json.dumps(cluster_config(stack, cs, engine_urls(engine)), indent=2)}}
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
                    engine_selector=engine.engine_selector,
                    metrics={"api": f"{url}/metrics/", **engine_metrics(engine)}, engine_images=engine.engine_images)


def cluster_config(stack: LitellmStack, cs: Any, upstreams: list[str]) -> dict[str, Any]:
    """The local stack's config (one model_list entry per engine, one model_name: stacks/litellm.py) for the cluster's
    engines, which serve the model as served_name(cs): that is the model_name the load client reads from LiteLLM's
    /v1/models and sends back, and the `openai/<name>` LiteLLM asks each engine for."""
    from harness.targets.k8s.common import served_name

    config = stack.config(upstreams)
    name = served_name(cs)
    for entry in config["model_list"]:
        entry["model_name"], entry["litellm_params"]["model"] = name, f"openai/{name}"
    return config
