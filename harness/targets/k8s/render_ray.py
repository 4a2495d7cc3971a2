"""Ray Serve LLM on the k8s target (a KubeRay RayService) and the Serve application both targets deploy: the
local Ray stack's shape (scripts/ray_serve_app.py), `ray.serve.llm:build_openai_app` with one LLMConfig, as
a Serve config."""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from harness.targets.k8s.common import (
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
from harness.targets.k8s.engines import engine_count, named, replica_labels, replica_object
from harness.targets.k8s.plan import ClusterSettings
from stacks.base import Stack
from stacks.base.engine_env import engine_kwargs

RAY_HF_HOME = "/home/ray/.cache/huggingface"  # Ray's images run as the user `ray`
SERVE_PORT = 8000
METRICS_PORT = 8080  # each Ray node's metrics agent: the engine's vllm:* families as ray_vllm_*
RAY_LOGS = "/tmp/ray"
# vLLM logs into Ray's session files on the node that runs the engine, not to the pod's stdout: a sidecar that
# shares /tmp/ray prints vLLM's startup lines from them, so the engine version is read where Ray writes it
ENGINE_LOG_SIDECAR = ("until grep -rhE 'vLLM API server version|LLM engine \\(v[0-9]' "
                      f"{RAY_LOGS}/session_latest/logs 2>/dev/null; do sleep 5; done; exec sleep 2147483647")


def ray_version(image: str) -> str:
    """The Ray version of a Ray image's tag (rayproject/ray-llm:2.60.0-py312-cu130 -> 2.60.0), or ''."""
    found = re.match(r"(\d+\.\d+\.\d+)", image.rpartition(":")[2])
    return found.group(1) if found else ""


def serve_config(stack: Stack, cs: ClusterSettings, hf_home: str = RAY_HF_HOME) -> dict[str, Any]:
    """The Serve config of the application: the same LLMConfig and ingress settings as the local Ray stack,
    engine_kwargs exactly the baseline's engine settings (with the GPU memory share)."""
    o = stack.options
    e = stack.settings.engine
    ref = model_ref(cs, hf_home)
    kwargs = {**engine_kwargs(stack.settings, "Ray Serve LLM's engine_kwargs"),
              "gpu_memory_utilization": e.gpu_memory_utilization}
    if ref.revision:
        kwargs["revision"] = ref.revision
    env = ray_env(stack, hf_home)
    deployment = {"num_replicas": cs.replicas * engine_count(stack), "max_ongoing_requests": o.max_ongoing_requests,
                  **router_config(stack)}
    llm = {"model_loading_config": {"model_id": served_name(cs), "model_source": ref.model},
           "deployment_config": deployment,
           "engine_kwargs": kwargs,
           "experimental_configs": {"stream_batching_interval_ms": o.stream_batching_interval_ms},
           "log_engine_metrics": True,
           "runtime_env": {"env_vars": env}}
    ingress = {} if o.request_path == "direct" else {  # direct streaming refuses one (stacks/ray.py)
        "ingress_deployment_config": {"num_replicas": o.ingress_replicas,
                                      "max_ongoing_requests": o.max_ongoing_requests}}
    app = {"name": "layerbench", "route_prefix": "/", "import_path": "ray.serve.llm:build_openai_app",
           "args": {"llm_configs": [llm], **ingress}}
    return {"applications": [app]}


def router_config(stack: Stack) -> dict[str, Any]:
    """The LLMServer replicas' request router where there are several (engine.replicas), as the local Ray stack sets
    it (stacks/ray.py ROUTERS, scripts/ray_serve_app.py router_config, where the sources are cited): none for
    Serve's default (power of two choices), else the class and an imbalanced_threshold of 10."""
    from stacks.ray import ROUTERS

    router = ROUTERS[stack.options.request_router] if engine_count(stack) > 1 else None
    if router is None:
        return {}
    return {"request_router_config": {"request_router_class": router,
                                      "request_router_kwargs": {"imbalanced_threshold": 10}}}


def ray_env(stack: Stack, hf_home: str = RAY_HF_HOME) -> dict[str, str]:
    """Every Ray container's environment: the engine's, and the request path's switches (stacks/ray.py
    REQUEST_PATHS), which Ray reads as its modules import, in the controller and the replicas alike."""
    from stacks.ray import REQUEST_PATHS

    return {**engine_env(hf_home), "RAY_USAGE_STATS_ENABLED": "0", **REQUEST_PATHS[stack.options.request_path]}


def render_ray(stack: Stack, cs: ClusterSettings, run_id: str, label: str) -> Deployed:
    """The RayService: a head pod (controller, proxy, ingresses; no GPU) and one GPU worker per engine, and a
    Service per worker in front of its metrics agent. Several engines (engine.replicas) are as many worker groups
    of one pod, each labelled with its index, so each engine's ray_vllm_* families are read on their own
    (ray_metrics@0, ray_metrics@1, ...)."""
    name = object_name(run_id, label, "ray")
    svc = template("ray/rayservice.yaml", name=name, namespace=cs.namespace, image=cs.ray_image,
                   ray_version=ray_version(cs.ray_image), ingress_replicas=stack.options.ingress_replicas)
    svc["metadata"]["labels"] = labels(run_id, label, "layer")
    svc["spec"]["serveConfigV2"] = yaml.safe_dump(serve_config(stack, cs), sort_keys=False)
    cluster = svc["spec"]["rayClusterConfig"]
    if not cluster["rayVersion"]:
        del cluster["rayVersion"]
    head = cluster["headGroupSpec"]["template"]
    head["metadata"]["labels"] = labels(run_id, label, "layer")
    _ray_pod(head, stack, cs, resources(cs.ray_head_cpu, cs.ray_head_memory), cache=False)
    engine = labels(run_id, label, "engine")
    count = engine_count(stack)
    # Each worker's GPUs are its container's nvidia.com/gpu limit: KubeRay passes that to `ray start` as --num-gpus
    # (ray-operator/controllers/ray/common/pod.go, addWellKnownAcceleratorResources). An LLMServer replica asks for
    # tensor_parallel_size GPU bundles placed PACK, "as few nodes as possible" (Ray Serve LLM's default:
    # docs.ray.io/en/latest/serve/llm/user-guides/cross-node-parallelism.html; PACK: ray.util.placement_group's
    # docs), so with tensor_parallel_size GPUs a worker, each replica runs on one worker of its own.
    groups, metrics = [], {}
    template_group = cluster["workerGroupSpecs"][0]
    for i in range(count):
        group = copy.deepcopy(template_group)
        group["groupName"] = replica_object(template_group["groupName"], i, count)
        group["replicas"] = group["minReplicas"] = group["maxReplicas"] = cs.replicas  # a GPU worker per engine
        mine = replica_labels(engine, i, count)
        worker = group["template"]
        worker["metadata"]["labels"] = mine
        _ray_pod(worker, stack, cs, resources(cs.cpu, cs.memory, cs.gpus))
        gpu_pod(worker["spec"], cs)
        _log_sidecar(worker["spec"], cs.ray_image)
        groups.append(group)
        metrics[replica_object(f"{name}-metrics", i, count)] = mine
    cluster["workerGroupSpecs"] = groups
    services = [_metrics_service(m, cs, mine, labels(run_id, label, "layer")) for m, mine in metrics.items()]
    urls = [f"{service_url(m, cs.namespace, METRICS_PORT)}/metrics" for m in metrics]
    return Deployed(objects=[svc, *services], ready=[("RayService", name)],
                    url=service_url(f"{name}-serve-svc", cs.namespace, SERVE_PORT), engine_selector=selector(engine),
                    metrics=named(urls, "ray_metrics"), aliases=("ray_vllm_",), engine_images=[cs.ray_image])


def _ray_pod(pod: dict[str, Any], stack: Stack, cs: ClusterSettings, amounts: dict[str, Any],
             cache: bool = True) -> None:
    """A Ray pod's container (its environment, resources and, with `cache`, the HF cache) and volumes. Only the
    GPU workers mount the cache: the engine reads the model there (Ray Serve LLM loads its config in the engine
    replica: apply_checkpoint_info, ray/llm/_internal/serve/engines/vllm/vllm_engine.py, Ray 2.60.0), and a
    ReadWriteOnce claim attaches to one node only, ReadWriteOncePod to one pod (kubernetes.io, persistent volumes'
    access modes): a head on another node that mounted it too would never start (Multi-Attach)."""
    c = pod["spec"]["containers"][0]
    c.update(env=env_list(ray_env(stack), cs), resources=amounts, securityContext=container_security(),
             volumeMounts=[m for m in engine_mounts(RAY_HF_HOME) if cache or m["name"] != "hf-cache"])
    pod["spec"]["volumes"] = [cache_volume(cs), shm_volume(cs)] if cache else [shm_volume(cs)]
    pod["spec"]["automountServiceAccountToken"] = False


def _log_sidecar(pod: dict[str, Any], image: str) -> None:
    """The engine node's Ray logs on a shared volume, and a container that prints vLLM's startup lines."""
    volume = {"name": "ray-logs", "emptyDir": {}}
    pod["volumes"].append(volume)
    pod["containers"][0]["volumeMounts"].append({"name": "ray-logs", "mountPath": RAY_LOGS})
    pod["containers"].append({
        "name": "engine-log", "image": image, "command": ["sh", "-c", ENGINE_LOG_SIDECAR],
        "resources": resources("100m", "128Mi"), "securityContext": container_security(),
        "volumeMounts": [{"name": "ray-logs", "mountPath": RAY_LOGS, "readOnly": True}]})


def _metrics_service(name: str, cs: ClusterSettings, engine: dict[str, str], mine: dict[str, str]) -> dict[str, Any]:
    """A Service in front of the engine nodes' metrics agents (KubeRay makes one for the head and one for
    Serve, none for a worker's metrics), so the load reads the engine's ray_vllm_* families."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": cs.namespace,
                                                                 "labels": mine},
            "spec": {"type": "ClusterIP", "selector": dict(engine),
                     "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT,
                                "protocol": "TCP"}]}}
