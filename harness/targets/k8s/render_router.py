"""A router in front of the engines on the k8s target (vllm-router, smg): the bare vLLM engines (a Deployment and
Service each, engine.replicas of them) and the router's Deployment and Service (manifests/<role>/), every engine's
Service one of its --worker-urls, its metrics on their own port of the same Service."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RouterForm:
    """role: the manifests' folder and the objects' name; image: the router's; port and metrics_port: in its pod;
    metrics_key: the name its metrics endpoint is read by."""

    role: str
    image: str
    port: int
    metrics_port: int
    metrics_key: str


def render_router(stack: Any, cs: Any, run_id: str, label: str, form: RouterForm) -> Any:
    """The engines and, in front of them, the router `form` describes."""
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

    engine = render_vllm(stack, cs, run_id, label)
    role, port, metrics_port = form.role, form.port, form.metrics_port
    name = object_name(run_id, label, role)
    mine = labels(run_id, label, "layer")
    dep = template(f"{role}/deployment.yaml", name=name, namespace=cs.namespace, image=form.image, port=port,
                   metrics_port=metrics_port)
    dep["metadata"]["labels"] = dep["spec"]["selector"]["matchLabels"] = mine
    dep["spec"]["replicas"] = cs.replicas
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"] = mine
    pod["spec"]["containers"][0].update(args=stack.args(engine_urls(engine), "0.0.0.0", port, metrics_port),
                                        resources=resources(cs.front_cpu, cs.front_memory),
                                        securityContext=container_security())
    svc = template(f"{role}/service.yaml", name=name, namespace=cs.namespace, port=port, metrics_port=metrics_port)
    svc["metadata"]["labels"], svc["spec"]["selector"] = mine, dict(mine)
    url = service_url(name, cs.namespace, port)
    return Deployed(objects=[*engine.objects, dep, svc], ready=[*engine.ready, ("Deployment", name)], url=url,
                    engine_selector=engine.engine_selector,
                    metrics={form.metrics_key: service_url(name, cs.namespace, metrics_port) + "/metrics",
                             **engine_metrics(engine)}, engine_images=engine.engine_images)
