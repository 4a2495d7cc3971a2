"""Safety policy for the Kubernetes manifests layerbench renders (KServe, KubeRay, plain workloads): a
benchmark deployment must not share the node's network namespace, run privileged or let a process gain
privileges, and every container must have CPU and memory limits (a GPU limit is allowed as well), so that a
measured layer can neither reach beyond its pod nor take the node's resources from its neighbours.

`check_manifest(docs)` returns one line per violation ("Kind/name: path: what"); [] means the manifests may
be applied. Field paths follow the CRDs: KServe `serving.kserve.io/v1beta1` InferenceService (predictor,
transformer, explainer: inline pod spec, their framework containers such as `model` or `huggingface`, and
`workerSpec`), KServe (Cluster)ServingRuntime, KubeRay `ray.io/v1` RayService / RayCluster / RayJob (head and
worker group pod templates)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# workloads whose pod spec is at spec.template.spec
TEMPLATED = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job"}
KSERVE_COMPONENTS = ("predictor", "transformer", "explainer")
# InferenceService component fields that are a single container (v1beta1 CRD: predictor.model, .huggingface...)
KSERVE_CONTAINERS = ("model", "huggingface", "lightgbm", "onnx", "paddle", "pmml", "pytorch", "sklearn",
                     "tensorflow", "triton", "xgboost", "art")
REQUIRED_LIMITS = ("cpu", "memory")

PodSpec = tuple[str, dict[str, Any]]  # (path, pod spec)
Container = tuple[str, dict[str, Any]]  # (path, container)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _ray_cluster(path: str, spec: dict[str, Any]) -> tuple[list[PodSpec], list[Container]]:
    """A KubeRay cluster spec: the head group's and every worker group's pod template."""
    pods = [(f"{path}.headGroupSpec.template.spec", _dict(_dict(_dict(spec.get("headGroupSpec")).get("template"))
                                                           .get("spec")))]
    for i, group in enumerate(_list(spec.get("workerGroupSpecs"))):
        pods.append((f"{path}.workerGroupSpecs[{i}].template.spec",
                     _dict(_dict(_dict(group).get("template")).get("spec"))))
    containers = []
    if "autoscalerOptions" in spec:  # the autoscaler sidecar KubeRay adds to the head pod
        containers.append((f"{path}.autoscalerOptions", _dict(spec["autoscalerOptions"])))
    return pods, containers


def _targets(doc: dict[str, Any]) -> tuple[list[PodSpec], list[Container]]:
    """The pod specs and stand-alone containers of one object, by kind."""
    kind, spec = doc.get("kind"), _dict(doc.get("spec"))
    if kind == "Pod":
        return [("spec", spec)], []
    if kind in TEMPLATED:
        return [("spec.template.spec", _dict(_dict(spec.get("template")).get("spec")))], []
    if kind == "CronJob":
        job = _dict(_dict(spec.get("jobTemplate")).get("spec"))
        return [("spec.jobTemplate.spec.template.spec", _dict(_dict(job.get("template")).get("spec")))], []
    if kind == "InferenceService":
        pods: list[PodSpec] = []
        containers: list[Container] = []
        for comp in KSERVE_COMPONENTS:
            if comp not in spec:
                continue
            body = _dict(spec[comp])
            pods.append((f"spec.{comp}", body))
            if "workerSpec" in body:
                pods.append((f"spec.{comp}.workerSpec", _dict(body["workerSpec"])))
            containers += [(f"spec.{comp}.{key}", _dict(body[key])) for key in KSERVE_CONTAINERS if key in body]
        return pods, containers
    if kind in ("ServingRuntime", "ClusterServingRuntime"):  # its containers run in the predictor's pod
        pods = [("spec", spec)]
        if "workerSpec" in spec:
            pods.append(("spec.workerSpec", _dict(spec["workerSpec"])))
        return pods, []
    if kind == "RayService":
        return _ray_cluster("spec.rayClusterConfig", _dict(spec.get("rayClusterConfig")))
    if kind == "RayCluster":
        return _ray_cluster("spec", spec)
    if kind == "RayJob":
        return _ray_cluster("spec.rayClusterSpec", _dict(spec.get("rayClusterSpec")))
    # anything else with a pod template (a CRD this policy does not know) is still checked
    template = _dict(_dict(spec.get("template")).get("spec"))
    return ([("spec.template.spec", template)] if "containers" in template else []), []


def _container_problems(path: str, c: dict[str, Any], need_limits: bool = True) -> Iterator[str]:
    sc = _dict(c.get("securityContext"))
    if sc.get("privileged") is True:
        yield f"{path}: privileged container"
    if sc.get("allowPrivilegeEscalation") is True:
        yield f"{path}: allowPrivilegeEscalation is true"
    if need_limits:
        limits = _dict(_dict(c.get("resources")).get("limits"))
        missing = [r for r in REQUIRED_LIMITS if r not in limits]
        if missing:
            yield f"{path}: no resources.limits for {', '.join(missing)}"


def _pod_problems(path: str, pod: dict[str, Any]) -> Iterator[str]:
    if pod.get("hostNetwork") is True:
        yield f"{path}: hostNetwork is true"
    for field in ("initContainers", "containers"):
        for i, c in enumerate(_list(pod.get(field))):
            c = _dict(c)
            yield from _container_problems(f"{path}.{field}[{i}] ({c.get('name', '?')})", c)
    for i, c in enumerate(_list(pod.get("ephemeralContainers"))):  # these cannot have resources
        c = _dict(c)
        yield from _container_problems(f"{path}.ephemeralContainers[{i}] ({c.get('name', '?')})", c, False)


def _objects(docs: list[Any]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        if not isinstance(doc, dict):  # empty YAML documents load as None
            continue
        if str(doc.get("kind") or "").endswith("List") and "items" in doc:
            yield from _objects(_list(doc.get("items")))
        else:
            yield doc


def check_manifest(docs: list[dict]) -> list[str]:
    """Violations of the policy in `docs` (parsed YAML documents, e.g. `list(yaml.safe_load_all(text))`)."""
    violations = []
    for doc in _objects(docs):
        who = f"{doc.get('kind', '?')}/{_dict(doc.get('metadata')).get('name', '?')}"
        pods, containers = _targets(doc)
        for path, pod in pods:
            violations += [f"{who}: {p}" for p in _pod_problems(path, pod)]
        for path, c in containers:
            # the autoscaler sidecar gets KubeRay's default limits; only its privileges are ours to check
            need_limits = not path.endswith("autoscalerOptions")
            violations += [f"{who}: {p}" for p in _container_problems(path, c, need_limits)]
    return violations
