"""What every renderer of the k8s and docker targets shares: the templates under manifests/, object names and
labels, where the model is in the Hugging Face cache, the engine's environment and flags on a GPU, and the
security context and resources every container gets."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from string import Template
from typing import Any

import yaml

from harness.errors import LayerbenchError
from harness.targets.k8s.plan import ClusterSettings, label_value
from stacks.base import PROJECT_ROOT, DeploySettings, target_form
from stacks.base.engine_env import engine_args

TEMPLATES = PROJECT_ROOT / "manifests"
ROOT_HF_HOME = "/root/.cache/huggingface"  # the HF cache of images that run as root (vLLM, Triton)
MANAGED_BY = {"app.kubernetes.io/managed-by": "layerbench"}
_COMMIT = re.compile(r"[0-9a-f]{40}")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when there is one: rendering stays fast


@dataclass
class Deployed:
    """One side's deployment as a renderer returns it; harness.targets.k8s.render adds the load Job."""

    objects: list[dict[str, Any]]
    ready: list[tuple[str, str]]
    url: str
    engine_selector: str
    protocol: str = "openai"
    model: str | None = None  # the model name a Triton client must name (OpenAI clients read /v1/models)
    # where the load reads the side's metrics (in-cluster URLs by name, as the local stack's metric_endpoints),
    # and the prefixes the layer puts in place of `vllm:` (Ray: ray_vllm_)
    metrics: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    engine_images: list[str] = field(default_factory=list)  # the images that run an engine (preflight reads each)
    # N bare engines and no layer (engine.replicas): every engine's base URL, `url` the first, which the load client
    # spreads its requests over itself by `spread_by` (engine.baseline_spread), as on the local target; [] for one
    spread: list[str] = field(default_factory=list)
    spread_by: str = "round_robin"


def template(path: str, **values: Any) -> dict[str, Any]:
    """manifests/<path> with its `$name` placeholders filled; a placeholder without a value is a bug of ours."""
    text = (TEMPLATES / path).read_text()
    try:
        return yaml.load(Template(text).substitute({k: str(v) for k, v in values.items()}), Loader=_LOADER)
    except KeyError as e:
        raise LayerbenchError(f"manifests/{path}: no value for placeholder ${e.args[0]}") from None


def check_stack(kind: str, target: str) -> None:
    """Refused, naming the stacks that have one, when the stack's adapter names no form for the target."""
    target_form(kind, target)


def object_name(run_id: str, label: str, kind: str) -> str:
    """A DNS-1035 name, unique per run and side: lb-<side>-<stack>-<the run id's random suffix>."""
    suffix = re.sub(r"[^a-z0-9]", "", run_id.rsplit("-", 1)[-1].lower())[:8] or "run"
    return f"lb-{label}-{kind}-{suffix}"


def labels(run_id: str, side: str, role: str) -> dict[str, str]:
    return {**MANAGED_BY, "layerbench.io/run": label_value(run_id), "layerbench.io/side": side,
            "layerbench.io/role": role}


def selector(match: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in match.items())


def service_url(service: str, namespace: str, port: int, prefix: str = "") -> str:
    return f"http://{service}.{namespace}.svc.cluster.local:{port}{prefix}"


def served_name(cs: ClusterSettings) -> str:
    """The name the engine serves the model under: the repo's last part, lower case (Qwen2.5-0.5B-Instruct ->
    qwen2.5-0.5b-instruct); also a valid Triton model directory."""
    name = re.sub(r"[^a-z0-9._-]", "-", cs.model.rsplit("/", 1)[-1].lower()).strip("-.")
    if not name:
        raise LayerbenchError(f"model {cs.model!r} is not a Hugging Face repo id")
    return name


@dataclass(frozen=True)
class ModelRef:
    """What an engine loads: a snapshot directory (revision pinned to a commit) or the repo id and a revision
    (a branch or tag, resolved offline from the cache's refs/)."""

    model: str
    revision: str | None


def model_ref(cs: ClusterSettings, hf_home: str) -> ModelRef:
    """The model inside an HF cache mounted at `hf_home` (the cache root: hub/ is below it). A snapshot's files
    are symlinks into ../../blobs, which is why the whole cache is mounted and not the snapshot directory."""
    return hub_ref(cs, f"{hf_home}/hub")


def hub_ref(cs: ClusterSettings, hub: str) -> ModelRef:
    """The model inside a hub cache directory (the one holding models--<org>--<name>/) mounted at `hub`."""
    if _COMMIT.fullmatch(cs.model_revision):
        repo_dir = "models--" + cs.model.replace("/", "--")
        return ModelRef(f"{hub}/{repo_dir}/snapshots/{cs.model_revision}", None)
    return ModelRef(cs.model, cs.model_revision)


def model_flags(ref: ModelRef) -> list[str]:
    return ["--model", ref.model, *(["--revision", ref.revision] if ref.revision else [])]


def gpu_engine_args(settings: DeploySettings) -> list[str]:
    """The baseline's engine flags (stacks.vllm.engine_args) as they are on a GPU host, whatever this host has."""
    args = engine_args(settings)
    if "--gpu-memory-utilization" not in args:
        at = len(args) - len(settings.engine.extra_args)
        args[at:at] = ["--gpu-memory-utilization", str(settings.engine.gpu_memory_utilization)]
    return args


def engine_env(hf_home: str) -> dict[str, str]:
    """Environment of every engine container: the cache is read offline (the PVC holds the model), no telemetry."""
    return {"HF_HOME": hf_home, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def env_list(env: dict[str, str], cs: ClusterSettings | None = None) -> list[dict[str, Any]]:
    """A container's env; with `cs`, HF_TOKEN from cs.hf_token_secret (optional: a public model needs none)."""
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    if cs is not None and cs.hf_token_secret:
        out.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": cs.hf_token_secret, "key": "HF_TOKEN", "optional": True}}})
    return out


def container_security(non_root: bool = False) -> dict[str, Any]:
    sc: dict[str, Any] = {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": {"drop": ["ALL"]}}
    if non_root:
        sc.update(runAsNonRoot=True, runAsUser=10001, runAsGroup=10001, readOnlyRootFilesystem=True)
    return sc


def resources(cpu: str, memory: str, gpus: int = 0) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        amounts["nvidia.com/gpu"] = str(gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def cache_volume(cs: ClusterSettings) -> dict[str, Any]:
    return {"name": "hf-cache", "persistentVolumeClaim": {"claimName": cs.hf_cache_pvc, "readOnly": True}}


def shm_volume(cs: ClusterSettings) -> dict[str, Any]:
    return {"name": "devshm", "emptyDir": {"medium": "Memory", "sizeLimit": cs.shm_size}}


def engine_mounts(hf_home: str) -> list[dict[str, Any]]:
    return [{"name": "hf-cache", "mountPath": hf_home, "readOnly": True}, {"name": "devshm", "mountPath": "/dev/shm"}]


def gpu_pod(pod: dict[str, Any], cs: ClusterSettings) -> dict[str, Any]:
    """An engine pod's spec: the runtime class when set, no service account token, no service env vars."""
    if cs.runtime_class:
        pod["runtimeClassName"] = cs.runtime_class
    pod.setdefault("automountServiceAccountToken", False)
    pod.setdefault("enableServiceLinks", False)
    return pod


def metadata(name: str, namespace: str, extra_labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **extra_labels}}
