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
from harness.targets.k8s.engines import engine_count, named, replica_labels, replica_object
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
    """Per engine (engine.replicas of them: harness.targets.k8s.engines) a Deployment (Recreate, readiness on
    /health, the HF cache PVC at the cache root, its own GPUs) and its Service. Several engines are spread over
    by the load client itself (Deployed.spread), each read on its own (api@0, api@1, ...)."""
    name = object_name(run_id, label, "vllm")
    engine = labels(run_id, label, "engine")
    count = engine_count(stack)
    objects: list[dict] = []
    urls = []
    for i in range(count):
        objects += _engine(stack, cs, replica_object(name, i, count), replica_labels(engine, i, count))
        urls.append(service_url(replica_object(name, i, count), cs.namespace, VLLM_PORT))
    return Deployed(objects=objects, ready=[("Deployment", replica_object(name, i, count)) for i in range(count)],
                    url=urls[0], engine_selector=selector(engine),
                    metrics=named([f"{u}/metrics" for u in urls], "api"), engine_images=[vllm_image(cs)],
                    spread=urls if count > 1 else [], spread_by=stack.settings.engine.baseline_spread)


def _engine(stack: Stack, cs: ClusterSettings, name: str, engine: dict[str, str]) -> list[dict]:
    """One engine's Deployment, its pods labelled `engine`, and the Service in front of them."""
    dep = template("vllm/deployment.yaml", name=name, namespace=cs.namespace, image=vllm_image(cs))
    dep["metadata"]["labels"] = engine
    dep["spec"]["replicas"] = cs.replicas
    dep["spec"]["selector"]["matchLabels"] = dict(engine)
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"] = dict(engine)
    env = {**engine_env(ROOT_HF_HOME), **stack.image_engine_env}  # a baseline: the layer image's engine settings
    pod["spec"]["containers"][0].update(
        args=vllm_server_args(stack, cs, ROOT_HF_HOME, "0.0.0.0"), env=env_list(env, cs),
        resources=resources(cs.cpu, cs.memory, cs.gpus), securityContext=container_security(),
        volumeMounts=engine_mounts(ROOT_HF_HOME))
    pod["spec"]["volumes"] = [cache_volume(cs), shm_volume(cs)]
    gpu_pod(pod["spec"], cs)
    svc = template("vllm/service.yaml", name=name, namespace=cs.namespace, port=VLLM_PORT)
    svc["metadata"]["labels"] = dict(engine)
    svc["spec"]["selector"] = dict(engine)
    return [dep, svc]
