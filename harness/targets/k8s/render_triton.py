"""Triton on the k8s target: NVIDIA's tritonserver image serving the vLLM backend it installs, with the local
Triton stack's engine settings (config.pbtxt, 1/model.json) from a ConfigMap."""

from __future__ import annotations

from typing import Any

from harness.targets.k8s.common import (
    ROOT_HF_HOME,
    Deployed,
    cache_volume,
    container_security,
    engine_env,
    engine_mounts,
    env_list,
    gpu_pod,
    labels,
    model_ref,
    object_name,
    resources,
    selector,
    served_name,
    service_url,
    shm_volume,
    template,
)
from harness.targets.k8s.plan import ClusterSettings
from stacks.base.triton_repo import model_json, nvidia_config_pbtxt
from stacks.triton import TritonStack

HTTP_PORT = 8000


def server_args(repository: str, address: str | None = None) -> list[str]:
    """tritonserver's flags, as the local Triton stack gives them; `address` binds all three ports to it."""
    ports = {"http": HTTP_PORT, "grpc": HTTP_PORT + 1, "metrics": HTTP_PORT + 2}
    binds = [f"--{what}-address={address}" for what in ports] if address else []
    return [f"--model-repository={repository}", *[f"--{what}-port={port}" for what, port in ports.items()], *binds,
            "--exit-on-error=false", "--exit-timeout-secs=15", "--backend-config=python,stub-timeout-seconds=600",
            "--log-verbose=0"]


def repository_files(stack: TritonStack, cs: ClusterSettings, hf_home: str = ROOT_HF_HOME) -> dict[str, str]:
    """The model repository's files by path under the repository root, for the vLLM backend NVIDIA's image
    installs (`backend: "vllm"`, the engine's arguments in 1/model.json: triton-inference-server/vllm_backend
    samples/model_repository/vllm_model), with the local stack's engine settings, the model in the HF cache and
    the engine's GPU memory share. No model.py: the image's own backend serves, as the report says."""
    model = served_name(cs)
    spec = stack.engine_spec()
    ref = model_ref(cs, hf_home)
    spec.update(model=ref.model, served_model_name=model,
                gpu_memory_utilization=stack.settings.engine.gpu_memory_utilization)
    if ref.revision:
        spec["revision"] = ref.revision
    metrics = bool(spec.get("report_engine_metrics"))
    return {f"{model}/config.pbtxt": nvidia_config_pbtxt(model, "KIND_MODEL", metrics, backend="vllm"),
            f"{model}/1/model.json": model_json(spec)}


def render_triton(stack: TritonStack, cs: ClusterSettings, run_id: str, label: str) -> Deployed:
    name = object_name(run_id, label, "triton")
    model = served_name(cs)
    engine = labels(run_id, label, "engine")
    files = repository_files(stack, cs)
    repo: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": f"{name}-model", "namespace": cs.namespace,
                                         "labels": labels(run_id, label, "config")},
                            "data": {path.rsplit("/", 1)[1]: text for path, text in files.items()}}
    dep = template("triton/deployment.yaml", name=name, namespace=cs.namespace, image=cs.triton_image, model=model,
                   configmap=f"{name}-model")
    dep["metadata"]["labels"] = engine
    dep["spec"]["replicas"] = cs.replicas
    dep["spec"]["selector"]["matchLabels"] = engine
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"] = engine
    init, server = pod["spec"]["initContainers"][0], pod["spec"]["containers"][0]
    init.update(resources=resources("1", "1Gi"), securityContext=container_security())
    server.update(args=server_args("/models"), env=env_list({**engine_env(ROOT_HF_HOME), "LC_ALL": "C.UTF-8"}, cs),
                  resources=resources(cs.cpu, cs.memory, cs.gpus), securityContext=container_security())
    server["volumeMounts"] += engine_mounts(ROOT_HF_HOME)
    pod["spec"]["volumes"] += [cache_volume(cs), shm_volume(cs)]
    gpu_pod(pod["spec"], cs)
    svc = template("triton/service.yaml", name=name, namespace=cs.namespace)
    svc["metadata"]["labels"] = engine
    svc["spec"]["selector"] = engine
    url = service_url(name, cs.namespace, HTTP_PORT)
    # as the local Triton stack declares them (metric_endpoints): Triton's own metrics port, HTTP + 2 (8002, its
    # --metrics-port default: triton-inference-server/server docs/user_guide/metrics.md). The serving port has no
    # /metrics (the stack's metricless_endpoints), so it is not scraped: each scrape would be a 404 gap
    metrics = {"triton_metrics": f"{service_url(name, cs.namespace, HTTP_PORT + 2)}/metrics"}
    return Deployed(objects=[repo, dep, svc], ready=[("Deployment", name)], url=url, engine_selector=selector(engine),
                    protocol="triton", model=model, metrics=metrics, engine_images=[cs.triton_image])
