"""Bare vLLM on the k8s and docker targets, the baseline of every compare (and the engine behind KServe's proxy
mode): vLLM's own OpenAI server from the official image of the run's engine version."""

from __future__ import annotations

from harness.targets.k8s.common import (
    ROOT_HF_HOME,
    Deployed,
    cache_volume,
    container_security,
    engine_env,
    engine_mounts,
    env_list,
    gpu_engine_args,
    gpu_pod,
    labels,
    model_flags,
    model_ref,
    object_name,
    resources,
    selector,
    served_name,
    service_url,
    shm_volume,
    template,
)
from harness.targets.k8s.images import vllm_image as image_of
from harness.targets.k8s.plan import ClusterSettings
from stacks.base import Stack

VLLM_PORT = 8000


def vllm_image(cs: ClusterSettings) -> str:
    assert cs.vllm_version, "harness.targets.k8s.plan.settle decides the version first"
    return image_of(cs.vllm_version)


def vllm_server_args(stack: Stack, cs: ClusterSettings, hf_home: str, host: str) -> list[str]:
    """Bare vLLM's command-line arguments on a GPU: the model in the HF cache, the baseline's engine flags."""
    return [*model_flags(model_ref(cs, hf_home)), "--served-model-name", served_name(cs), "--host", host,
            "--port", str(VLLM_PORT), *gpu_engine_args(stack.settings)]


def render_vllm(stack: Stack, cs: ClusterSettings, run_id: str, label: str) -> Deployed:
    """Deployment (Recreate, readiness on /health, the HF cache PVC at the cache root) and its Service."""
    name = object_name(run_id, label, "vllm")
    engine = labels(run_id, label, "engine")
    dep = template("vllm/deployment.yaml", name=name, namespace=cs.namespace, image=vllm_image(cs))
    dep["metadata"]["labels"] = engine
    dep["spec"]["replicas"] = cs.replicas
    dep["spec"]["selector"]["matchLabels"] = engine
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"] = engine
    pod["spec"]["containers"][0].update(
        args=vllm_server_args(stack, cs, ROOT_HF_HOME, "0.0.0.0"), env=env_list(engine_env(ROOT_HF_HOME), cs),
        resources=resources(cs.cpu, cs.memory, cs.gpus), securityContext=container_security(),
        volumeMounts=engine_mounts(ROOT_HF_HOME))
    pod["spec"]["volumes"] = [cache_volume(cs), shm_volume(cs)]
    gpu_pod(pod["spec"], cs)
    svc = template("vllm/service.yaml", name=name, namespace=cs.namespace, port=VLLM_PORT)
    svc["metadata"]["labels"] = engine
    svc["spec"]["selector"] = engine
    url = service_url(name, cs.namespace, VLLM_PORT)
    return Deployed(objects=[dep, svc], ready=[("Deployment", name)], url=url, engine_selector=selector(engine),
                    metrics={"api": f"{url}/metrics"}, engine_images=[vllm_image(cs)])
