"""The vllm-router stack's cluster form: named by the adapter's `k8s_form` (stacks/vllm_router.py)."""

from __future__ import annotations

from typing import Any

from stacks.base import Stack
from stacks.vllm_router import IMAGE, METRICS_PORT, PORT, VllmRouterStack


def render_k8s(stack: Stack, cs: Any, run_id: str, label: str) -> Any:
    """The bare vLLM engines (a Deployment and Service each, engine.replicas of them) and the router's Deployment
    and Service in front of them (manifests/vllm-router/), every engine's Service one of its --worker-urls, its
    metrics on their own port of the same Service."""
    from harness.targets.k8s.common import (
        Deployed,
        container_security,
        labels,
        object_name,
        resources,
        service_url,
        template,
    )
    from harness.targets.k8s.engines import engine_metrics, engine_urls
    from harness.targets.k8s.render_vllm import render_vllm

    assert isinstance(stack, VllmRouterStack)
    engine = render_vllm(stack, cs, run_id, label)
    name = object_name(run_id, label, "vllm-router")
    mine = labels(run_id, label, "layer")
    dep = template("vllm-router/deployment.yaml", name=name, namespace=cs.namespace, image=stack.options.image or IMAGE,
                   port=PORT, metrics_port=METRICS_PORT)
    dep["metadata"]["labels"] = dep["spec"]["selector"]["matchLabels"] = mine
    dep["spec"]["replicas"] = cs.replicas
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"] = mine
    pod["spec"]["containers"][0].update(args=stack.args(engine_urls(engine), "0.0.0.0", PORT, METRICS_PORT),
                                        resources=resources(cs.front_cpu, cs.front_memory),
                                        securityContext=container_security())
    svc = template("vllm-router/service.yaml", name=name, namespace=cs.namespace, port=PORT,
                   metrics_port=METRICS_PORT)
    svc["metadata"]["labels"], svc["spec"]["selector"] = mine, dict(mine)
    url = service_url(name, cs.namespace, PORT)
    return Deployed(objects=[*engine.objects, dep, svc], ready=[*engine.ready, ("Deployment", name)], url=url,
                    engine_selector=engine.engine_selector,
                    metrics={"router_metrics": service_url(name, cs.namespace, METRICS_PORT) + "/metrics",
                             **engine_metrics(engine)}, engine_images=engine.engine_images)
