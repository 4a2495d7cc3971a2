"""KServe on the k8s target, by the stack's `mode`:
- raw: the vLLM ServingRuntime and InferenceService of stacks.base.kserve_manifests (the runtime is vLLM's own
  OpenAI server; KServe creates the Deployment and Service and leaves the request path), on a GPU;
- inprocess: KServe's Hugging Face runtime (its model server and data plane in the path, vLLM in-process);
- proxy: KServe's model server with its OpenAIProxyModel (scripts/kserve_server.py, as the local mode runs
  it) in front of a bare vLLM Deployment."""

from __future__ import annotations

import json
from typing import Any

from harness.errors import LayerbenchError
from harness.targets.k8s.common import (
    Deployed,
    cache_volume,
    container_security,
    engine_mounts,
    env_list,
    gpu_engine_args,
    hub_ref,
    labels,
    metadata,
    model_ref,
    object_name,
    resources,
    served_name,
    service_url,
    shm_volume,
    template,
)
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render_vllm import render_vllm
from stacks.base import PROJECT_ROOT, Stack
from stacks.base.kserve_manifests import POD_MODEL_DIR, RuntimeContainer
from stacks.base.kserve_manifests import render as render_raw_objects

HF_RUNTIME_HOME = "/mnt/hf-cache"  # KServe's Hugging Face image runs as a non-root user: not under /root
SERVICE_PORT = 80  # RawDeployment's predictor Service: port 80 -> the container's 8080
MODES = ("raw", "inprocess", "proxy")
SERVER = PROJECT_ROOT / "scripts" / "kserve_server.py"
PROXY_PORT = 8080
OPENAI_PREFIX = "/openai"  # KServe's model server serves the OpenAI API under /openai/v1


def kserve_mode(stack: Stack) -> str:
    mode = str(getattr(stack.options, "mode", "raw"))
    if mode not in MODES:
        raise LayerbenchError(f"stack kserve: mode {mode} has no k8s form; the k8s target has {', '.join(MODES)}")
    return mode


def storage(cs: ClusterSettings) -> tuple[str, list[str], dict[str, str]]:
    """(storageUri, model args, model env) of the raw runtime: hf://<repo>[:<revision>] fetched by KServe's
    storage initializer into /mnt/models, or the HF cache PVC's hub/ directory mounted there, the model loaded
    from its snapshot (the runtime's --model=/mnt/models is overridden: the last --model wins)."""
    if cs.kserve_storage == "hf":
        revision = f":{cs.model_revision}" if cs.model_revision != "main" else ""
        return f"hf://{cs.model}{revision}", [], {}
    ref = hub_ref(cs, POD_MODEL_DIR)
    args = [f"--model={ref.model}", *([f"--revision={ref.revision}"] if ref.revision else [])]
    return f"pvc://{cs.hf_cache_pvc}/hub", args, {"HF_HUB_CACHE": POD_MODEL_DIR}


def _finish(runtime: dict[str, Any], isvc: dict[str, Any], cs: ClusterSettings, mine: dict[str, str],
            mounts: list[dict[str, Any]], volumes: list[dict[str, Any]]) -> None:
    """Namespace, labels (`mine`: the side's layer labels), GPU, /dev/shm, the HF token and the runtime class of a
    runtime and its service."""
    for obj in (runtime, isvc):
        obj["metadata"]["namespace"] = cs.namespace
        obj["metadata"]["labels"] = dict(mine)
    container = runtime["spec"]["containers"][0]
    container["resources"] = resources(cs.cpu, cs.memory, cs.gpus)
    container["env"] = [*container.get("env", []), *env_list({}, cs)]
    container["volumeMounts"] = mounts
    runtime["spec"]["volumes"] = volumes
    predictor = isvc["spec"]["predictor"]
    predictor["minReplicas"] = predictor["maxReplicas"] = cs.replicas
    predictor["model"]["resources"] = resources(cs.cpu, cs.memory, cs.gpus)
    predictor["automountServiceAccountToken"] = False
    if cs.runtime_class:
        predictor["runtimeClassName"] = cs.runtime_class


def raw_objects(stack: Stack, cs: ClusterSettings, name: str) -> list[dict[str, Any]]:
    """[ServingRuntime, InferenceService] of the raw mode: stacks.base.kserve_manifests' objects with the official
    vLLM image of the engine version, the baseline's engine flags on a GPU, and the model's storage."""
    uri, model_args, model_env = storage(cs)
    runtime, isvc = render_raw_objects(stack.settings, [*gpu_engine_args(stack.settings), *model_args], name=name,
                                       storage_uri=uri, container=RuntimeContainer(version=f"v{cs.vllm_version}",
                                                                                   cpu=cs.cpu, memory=cs.memory))
    if model_env:
        isvc["spec"]["predictor"]["model"]["env"] = env_list(model_env)
    return [runtime, isvc]


def hf_model_args(cs: ClusterSettings) -> list[str]:
    """How KServe's Hugging Face runtime finds the model in the HF cache it reads offline. A revision that is a
    commit: the snapshot directory, as --model_dir. The runtime's vLLM check reads the model's config with
    AutoConfig.from_pretrained(model_id) and no revision (kserve python/huggingfaceserver/huggingfaceserver/vllm/
    utils.py, infer_vllm_supported_from_model_architecture, at v0.20.0 and on master in 2026-08), which offline
    needs refs/main, and a cache filled at a commit has no refs/ at all (huggingface_hub's snapshot_download writes
    refs/<revision> only when the revision is not the commit itself). A local --model_dir is used in place
    (kserve_storage's Storage.download returns a local path as it is) and handed to vLLM as its model. A branch or
    tag: --model_id and --model_revision, resolved from refs/ (the vLLM check reads refs/main even then)."""
    ref = model_ref(cs, HF_RUNTIME_HOME)
    if ref.revision is None:
        return [f"--model_dir={ref.model}"]
    return [f"--model_id={ref.model}", f"--model_revision={ref.revision}"]


def hf_objects(stack: Stack, cs: ClusterSettings, name: str) -> list[dict[str, Any]]:
    """[ServingRuntime, InferenceService] of the inprocess mode: KServe's Hugging Face runtime, vLLM in its
    process (--backend=vllm) with the baseline's engine flags, the model read from the HF cache."""
    values = {"name": name, "runtime": f"{name}-hf", "image": cs.kserve_hf_image, "hf_home": HF_RUNTIME_HOME,
              "cpu": cs.cpu, "memory": cs.memory}
    runtime = template("kserve/servingruntime-huggingface.yaml", **values)
    isvc = template("kserve/inferenceservice-huggingface.yaml", **values)
    isvc["spec"]["predictor"]["model"]["args"] = [*hf_model_args(cs), "--backend=vllm",
                                                  *gpu_engine_args(stack.settings)]
    return [runtime, isvc]


def proxy_config(cs: ClusterSettings, upstream: str) -> dict[str, Any]:
    """scripts/kserve_server.py's config for the proxy mode, in a pod: every interface of the pod's own network."""
    return {"mode": "proxy", "name": served_name(cs), "host": "0.0.0.0", "port": PROXY_PORT,
            "applied": "/tmp/applied.json", "predictor_url": upstream, "read_timeout_s": 30.0}


def render_proxy(stack: Stack, cs: ClusterSettings, run_id: str, label: str) -> Deployed:
    """The bare vLLM engine (its own Deployment and Service) and KServe's proxy Deployment in front of it."""
    engine = render_vllm(stack, cs, run_id, label)
    name = object_name(run_id, label, "kserve")
    mine = labels(run_id, label, "layer")
    server = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(f"{name}-server", cs.namespace, mine),
              "data": {"kserve_server.py": SERVER.read_text(),
                       "config.json": json.dumps(proxy_config(cs, engine.url), indent=2)}}
    dep = template("kserve/proxy-deployment.yaml", name=name, namespace=cs.namespace, image=cs.kserve_hf_image,
                   model=served_name(cs), configmap=f"{name}-server")
    dep["metadata"]["labels"] = mine
    dep["spec"]["replicas"] = cs.replicas
    dep["spec"]["selector"]["matchLabels"] = mine
    pod = dep["spec"]["template"]
    pod["metadata"]["labels"] = mine
    pod["spec"]["containers"][0].update(resources=resources(cs.front_cpu, cs.front_memory),
                                        securityContext=container_security())
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": metadata(name, cs.namespace, mine),
           "spec": {"type": "ClusterIP", "selector": dict(mine), "ports": [
               {"name": "http", "port": PROXY_PORT, "targetPort": PROXY_PORT, "protocol": "TCP"}]}}
    root = service_url(name, cs.namespace, PROXY_PORT)
    return Deployed(objects=[*engine.objects, server, dep, svc], ready=[*engine.ready, ("Deployment", name)],
                    url=root + OPENAI_PREFIX, engine_selector=engine.engine_selector,
                    metrics={"api": f"{root}/metrics", "engine": engine.metrics["api"]},
                    engine_images=engine.engine_images)


def render_kserve(stack: Stack, cs: ClusterSettings, run_id: str, label: str) -> Deployed:
    mode = kserve_mode(stack)
    if mode == "proxy":
        return render_proxy(stack, cs, run_id, label)
    name = object_name(run_id, label, "kserve")
    if mode == "raw":
        runtime, isvc = raw_objects(stack, cs, name)
        _finish(runtime, isvc, cs, labels(run_id, label, "layer"), [{"name": "devshm", "mountPath": "/dev/shm"}],
                [shm_volume(cs)])
        prefix = ""
    else:
        runtime, isvc = hf_objects(stack, cs, name)
        _finish(runtime, isvc, cs, labels(run_id, label, "layer"), engine_mounts(HF_RUNTIME_HOME),
                [cache_volume(cs), shm_volume(cs)])
        prefix = OPENAI_PREFIX
    root = service_url(f"{name}-predictor", cs.namespace, SERVICE_PORT)
    return Deployed(objects=[runtime, isvc], ready=[("InferenceService", name)], url=root + prefix,
                    engine_selector=f"serving.kserve.io/inferenceservice={name}",
                    metrics={"api": f"{root}/metrics"},  # vLLM's own, or KServe's model server's, at the root
                    engine_images=[runtime["spec"]["containers"][0]["image"]])
