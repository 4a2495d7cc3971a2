"""What the k8s target deploys for one run, as data: per side (the version-matched baseline first, then the
stack) the objects to apply, the objects whose readiness means "serving", the in-cluster address the load Job
targets, and the load Job itself. Rendered by harness.targets.k8s.render, written by `--dry-run`, applied and watched
by harness.targets.k8s.cluster. Plain dicts for the objects: they are exactly what goes to the API server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import LayerbenchError
from harness.profile.models import STUDY_MODEL, model_kind
from harness.profile.schema import EngineSettings
from harness.targets.k8s.images import (
    BUNDLED,
    DEFAULT_KSERVE_HF_IMAGE,
    DEFAULT_RAY_IMAGE,
    DEFAULT_TRITON_IMAGE,
    LOAD_IMAGE_PLACEHOLDER,
    default_engine_version,
    known_vllm,
    release,
)

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
    model: str = Field(STUDY_MODEL[0], description="Hugging Face repo id the GPU runs serve (a profile's hub "
                       "engine.model takes its place)")
    model_revision: str = Field(STUDY_MODEL[1], description="its revision inside the HF cache (a commit pins it)")
    hf_cache_pvc: str = Field("hf-cache", description="PVC holding the HF cache (its root is mounted)")
    hf_token_secret: str | None = Field(None, description="Secret with key HF_TOKEN, for gated models")
    runtime_class: str | None = Field(None, description="runtimeClassName for GPU pods (e.g. nvidia)")
    gpus: int | None = Field(None, ge=0, description="nvidia.com/gpu per engine pod (default: the profile's "
                             "engine.tensor_parallel_size)")
    replicas: int = Field(1, ge=1, le=64, description="engine replicas per side, the same settings, behind one "
                          "Service (Ray: LLMServer replicas; KServe: min/maxReplicas)")
    load_parallelism: int = Field(1, ge=1, le=64, description="load Job pods per side, each with its share of a "
                                  "level's slots, started together on a barrier; their records merge into one level")
    cpu: str = "8"
    memory: str = "32Gi"
    vllm_version: str | None = Field(None, description="engine version on both sides; default: the vLLM that "
                                     "the stack's image bundles (harness/targets/k8s/images.py), "
                                     "which bare vLLM then runs")
    ready_timeout_s: float = Field(1800.0, gt=0)
    delete_timeout_s: float = Field(600.0, gt=0)
    load_image: str = Field(LOAD_IMAGE_PLACEHOLDER, description="the harness image, built from this checkout's "
                            "Dockerfile and pushed where the cluster pulls from (preflight refuses the placeholder)")
    # what the renderers need beyond the above (harness.targets.k8s.render, harness.targets.k8s.docker)
    k8s_version: str = Field("1.33", pattern=r"^1\.\d+$", description="Kubernetes version the built-in "
                             "objects are validated against (kubernetes-validate)")
    ray_image: str = Field(DEFAULT_RAY_IMAGE, description="Ray Serve LLM image (tags: "
                           "<ray version>-py312-cu130); bare vLLM runs the vLLM it bundles")
    triton_image: str = Field(DEFAULT_TRITON_IMAGE, description="Triton with vLLM and the Python backend "
                              "(<yy.mm>-vllm-python-py3); preflight reads its vLLM, which bare vLLM then runs")
    kserve_hf_image: str = Field(DEFAULT_KSERVE_HF_IMAGE, description="KServe's Hugging Face runtime (mode "
                                 "inprocess); bare vLLM runs the vLLM it bundles")
    kserve_storage: Literal["hf", "pvc"] = Field("hf", description="where KServe's raw runtime gets the model: "
                                                 "hf:// (its storage initializer downloads it) or the HF cache PVC")
    ray_head_cpu: str = Field("4", pattern=_QUANTITY, description="Ray head pod (controller, proxy, ingresses)")
    ray_head_memory: str = Field("16Gi", pattern=_QUANTITY)
    front_cpu: str = Field("4", pattern=_QUANTITY, description="the pod of a layer that is a process in front of "
                           "the engine (KServe's proxy mode, a gateway, a router)")
    front_memory: str = Field("8Gi", pattern=_QUANTITY)
    load_cpu: str = Field("2", pattern=_QUANTITY, description="load Job pod")
    load_memory: str = Field("4Gi", pattern=_QUANTITY)
    shm_size: str = Field("8Gi", pattern=_QUANTITY, description="memory-backed /dev/shm of engine pods")
    results_pvc: str | None = Field(None, description="PVC the load Job writes its results to (else an emptyDir, "
                                    "which lives as long as the Job's pod)")
    check_driver: bool = Field(True, description="refuse, before any image is pulled, a GPU whose NVIDIA driver is "
                               "older than an engine image's CUDA needs (false: data-center GPUs running newer CUDA "
                               "through the forward-compatibility package)")


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
    engine_images: list[str] = []  # the images that run the side's engine: preflight reads each one's vLLM
    gpus: int = 0  # nvidia.com/gpu the side takes at once (engine replicas x GPUs per engine pod)
    aliases: tuple[str, ...] = ()  # prefixes the layer puts in place of `vllm:` (Ray: ray_vllm_)


class K8sPlan(BaseModel):
    run_id: str
    namespace: str
    sides: list[Side]
    settings: ClusterSettings | None = None  # as settled for this run (harness.targets.k8s.plan.settle)
    engine: dict[str, Any] = {}  # how the engine version was chosen: version, source, provisional, stack_image
    command: str = "run"
    stack: str = ""


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


def engine_image(kind: str, mode: str | None, cs: ClusterSettings) -> str | None:
    """The image that carries a stack's own engine (None: the stack runs bare vLLM's image: vllm, KServe raw)."""
    return {"ray": cs.ray_image, "triton": cs.triton_image}.get(kind) or (
        cs.kserve_hf_image if kind == "kserve" and mode == "inprocess" else None)


def settle(cs: ClusterSettings, kind: str, mode: str | None, engine: EngineSettings) -> tuple[ClusterSettings, dict]:
    """The settings one run renders with: the profile's hub model in place of the cluster's, GPUs per engine pod
    from the tensor-parallel size, and the engine version both sides run: the one set, else the one the stack's
    image bundles (known before it runs, or measured by preflight), else the local engine's. Returns them and
    how the version was chosen (`provisional`: preflight measures the stack's image and renders again)."""
    update: dict = {}
    if model_kind(engine.model) == "hub":
        update.update(model=engine.model, model_revision=engine.revision or "main")
    if cs.gpus is None:
        update["gpus"] = engine.tensor_parallel_size
    image = engine_image(kind, mode, cs)
    if cs.vllm_version is not None:
        how = {"version": cs.vllm_version, "source": "cluster config vllm_version", "provisional": False}
    elif image and (known := known_vllm(image)):
        how = {"version": known, "source": BUNDLED[image][1] if image in BUNDLED else f"the tag of {image}",
               "provisional": False}
    else:
        how = {"version": default_engine_version(), "provisional": image is not None,
               "source": f"read from {image} at preflight" if image else "the local engine's pinned version"}
    update["vllm_version"] = how["version"] = release(how["version"])
    return cs.model_copy(update=update), {**how, "stack_image": image}
