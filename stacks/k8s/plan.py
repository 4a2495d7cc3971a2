"""What the k8s target deploys for one run, as data: per side (the version-matched baseline first, then the
stack) the objects to apply, the objects whose readiness means "serving", the in-cluster address the load Job
targets, and the load Job itself. Rendered by stacks.k8s.render, written by `--dry-run`, applied and watched
by stacks.k8s.cluster. Plain dicts for the objects: they are exactly what goes to the API server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import LayerbenchError

_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$"  # a Kubernetes resource quantity


def label_value(text: str) -> str:
    """`text` as a label value: at most 63 of [A-Za-z0-9-_.], starting and ending alphanumeric (the renderers
    label with it, the cluster side selects with it)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


class ClusterSettings(BaseModel):
    """Where and with what the k8s and docker targets deploy: defaults below, overridden by a YAML file of the
    same keys (`--cluster-config FILE`, `make ... CLUSTER_CONFIG=FILE`; `load_cluster_settings`)."""

    model_config = ConfigDict(extra="forbid")
    namespace: str = Field("layerbench", description="namespace for everything a run creates")
    kserve_namespace: str = Field("kserve", description="where KServe's controller and inferenceservice-config live")
    model: str = Field("Qwen/Qwen2.5-0.5B-Instruct", description="Hugging Face repo id the GPU runs serve")
    model_revision: str = Field("main", description="snapshot revision inside the HF cache")
    hf_cache_pvc: str = Field("hf-cache", description="PVC holding the HF cache (its root is mounted)")
    hf_token_secret: str | None = Field(None, description="Secret with key HF_TOKEN, for gated models")
    runtime_class: str | None = Field(None, description="runtimeClassName for GPU pods (e.g. nvidia)")
    gpus: int = Field(1, ge=0, description="nvidia.com/gpu per engine pod")
    cpu: str = "8"
    memory: str = "32Gi"
    vllm_version: str = Field("0.32.0", description="engine version on both sides (image tags follow it)")
    ready_timeout_s: float = Field(1800.0, gt=0)
    delete_timeout_s: float = Field(600.0, gt=0)
    load_image: str = Field("ghcr.io/layerbench/layerbench:latest", description="image with this harness")
    # what the renderers need beyond the above (stacks.k8s.render, stacks.k8s.docker)
    k8s_version: str = Field("1.33", pattern=r"^1\.\d+$", description="Kubernetes version the built-in "
                             "objects are validated against (kubernetes-validate)")
    ray_image: str = Field("rayproject/ray-llm:2.60.0-py311-cu128", description="Ray Serve LLM image (tags: "
                           "<ray version>-py<python>-cu<cuda>); its bundled vLLM must be vllm_version")
    triton_image: str = Field("nvcr.io/nvidia/tritonserver:25.12-vllm-python-py3", description="Triton with "
                              "vLLM and the Python backend (<yy.mm>-vllm-python-py3); its vLLM must be vllm_version")
    kserve_hf_image: str = Field("kserve/huggingfaceserver:v0.21.0-gpu", description="KServe's Hugging Face "
                                 "runtime (mode inprocess); its bundled vLLM must be vllm_version")
    kserve_storage: Literal["hf", "pvc"] = Field("hf", description="where KServe's raw runtime gets the model: "
                                                 "hf:// (its storage initializer downloads it) or the HF cache PVC")
    ray_head_cpu: str = Field("4", pattern=_QUANTITY, description="Ray head pod (controller, proxy, ingresses)")
    ray_head_memory: str = Field("16Gi", pattern=_QUANTITY)
    load_cpu: str = Field("2", pattern=_QUANTITY, description="load Job pod")
    load_memory: str = Field("4Gi", pattern=_QUANTITY)
    shm_size: str = Field("8Gi", pattern=_QUANTITY, description="memory-backed /dev/shm of engine pods")
    results_pvc: str | None = Field(None, description="PVC the load Job writes its results to (else an emptyDir, "
                                    "which lives as long as the Job's pod)")


class Side(BaseModel):
    """One deployment of a compare: its objects, the ones whose readiness gates the load, and its address."""

    label: Literal["baseline", "stack"]
    stack: str  # the adapter's kind: vllm, ray, triton, kserve
    objects: list[dict[str, Any]]
    ready: list[tuple[str, str]]  # (kind, name) that must report ready before the load starts
    url: str  # in-cluster base URL the load Job targets (a Service's cluster DNS name, never a port-forward)
    protocol: Literal["openai", "triton"] = "openai"
    engine_selector: str  # label selector of the pod(s) running the engine (version, logs, GPU freed)
    load_job: dict[str, Any]  # batch/v1 Job running the harness against `url`


class K8sPlan(BaseModel):
    run_id: str
    namespace: str
    sides: list[Side]


def load_cluster_settings(path: str | None) -> ClusterSettings:
    """The defaults, or a YAML mapping of ClusterSettings keys; one LayerbenchError naming the file and field."""
    if not path:
        return ClusterSettings()
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise LayerbenchError(f"cluster config {path} cannot be read: {e.strerror or e}") from None
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as e:
        raise LayerbenchError(f"cluster config {path} is not valid YAML: {str(e)[:300]}") from None
    if not isinstance(data, dict):
        raise LayerbenchError(f"cluster config {path}: expected a mapping of settings "
                              f"({', '.join(ClusterSettings.model_fields)})")
    try:
        return ClusterSettings.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or '?'}: {err['msg']}" for err in e.errors())
        raise LayerbenchError(f"cluster config {path}: {problems}") from None
