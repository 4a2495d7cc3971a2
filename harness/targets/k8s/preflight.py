"""Checks before the k8s target deploys anything, each failing with what to do about it (LayerbenchError, exit
2): the cluster answers; for KServe its namespace exists (a Serverless default is a warning: each InferenceService
asks for RawDeployment); the CRDs the run's custom resources need are installed and serve the version the plan
uses, and the plan's objects pass those CRDs' own schemas; a node can give an engine pod its GPUs, and its NVIDIA
driver (GPU feature discovery's labels) runs the engine images' CUDA; the namespace's quota has room for a side's;
the PVCs and Secrets the plan's pods use but the plan does not create exist. Then the probes
(harness/targets/k8s/probes.py):
every engine image's vLLM, the load image, the model in the HF-cache PVC. A check the kubeconfig's user may not
make (403: nodes and CRDs need cluster-wide read) is a warning, not a failure."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from harness.errors import LayerbenchError
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.crds import schema_of_crd
from harness.targets.k8s.crds import validate as crd_validate
from harness.targets.k8s.driver_check import check_nodes
from harness.targets.k8s.kubeapi import CUSTOM_PLURALS, api_error, unreachable
from harness.targets.k8s.plan import ClusterSettings
from stacks.base import get_stack

INSTALL = {"serving.kserve.io": "install KServe", "ray.io": "install the KubeRay operator"}
RAW_MODES = ("RawDeployment", "Standard")  # KServe >= 0.15 calls RawDeployment "Standard" (pkg/constants)
ISVC_CONFIG = "inferenceservice-config"
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
GPU = "nvidia.com/gpu"


def _read(fn: Any, *args: Any) -> dict[str, Any] | None:
    """An object as JSON, None on 404 (other API errors are the caller's to judge)."""
    try:
        return json.loads(fn(*args, _request_timeout=15, _preload_content=False).data)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def check_reachable(cluster: Cluster) -> str:
    """The server's version; a cluster that does not answer, or refuses the credentials, is one message."""
    try:
        info = _read(k8s.VersionApi(cluster.api).get_code) or {}
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise unreachable(cluster.host, e) from None
    except ApiException as e:
        raise LayerbenchError(f"the cluster at {cluster.host} refused the kubeconfig's credentials "
                              f"({api_error(e)}); check KUBECONFIG") from None
    return str(info.get("gitVersion", "?"))


def deployment_mode(deploy: str) -> str | None:
    """defaultDeploymentMode from the `deploy` key of inferenceservice-config (JSON; `#` comment lines are
    skipped, as KServe's shipped example has them)."""
    try:
        return json.loads(deploy).get("defaultDeploymentMode")
    except (ValueError, AttributeError):
        m = re.search(r'^[ \t]*"defaultDeploymentMode"\s*:\s*"([^"]*)"', deploy, re.M)
        return m.group(1) if m else None


def kserve_mode_fix(namespace: str) -> str:
    return (f"set defaultDeploymentMode to RawDeployment in ConfigMap {namespace}/{ISVC_CONFIG}, key deploy "
            f"(kubectl edit configmap {ISVC_CONFIG} -n {namespace}), and restart the KServe controller")


def _check_kserve(cluster: Cluster, settings: ClusterSettings, warnings: list[str]) -> None:
    core, ns = k8s.CoreV1Api(cluster.api), settings.kserve_namespace
    try:
        found = _read(core.read_namespace, ns)
        cm = _read(core.read_namespaced_config_map, ISVC_CONFIG, ns) if found is not None else None
    except ApiException as e:  # a tenant may not read KServe's namespace or its settings (403): a warning
        if e.status != 403:
            raise LayerbenchError(f"cannot read KServe's namespace {ns} or its ConfigMap {ISVC_CONFIG}: "
                                  f"{api_error(e)}") from None
        warnings.append(f"cannot check KServe's install in namespace {ns} ({api_error(e)}): its default deployment "
                        f"mode is unknown; every InferenceService layerbench creates asks for {MODE_ANNOTATION}: "
                        "RawDeployment, and creating them will tell")
        return
    if found is None:
        raise LayerbenchError(f"namespace {ns} missing: KServe is not installed (stack kserve needs its controller "
                              f"there); install KServe, or set ClusterSettings.kserve_namespace to where it runs")
    if cm is None:
        raise LayerbenchError(f"ConfigMap {ns}/{ISVC_CONFIG} missing: KServe's controller reads its settings "
                              f"there; reinstall KServe")
    mode = deployment_mode((cm.get("data") or {}).get("deploy", "")) or "Serverless (KServe's default when unset)"
    if mode in RAW_MODES:
        return
    # KServe's own install ships Serverless (charts/kserve-resources/files/common/configmap.yaml), and the
    # controller resolves each InferenceService's mode from its annotation first (pkg/constants ParseDeploymentMode:
    # RawDeployment -> Standard), so a stock install runs these services; should the controller still go Knative
    # (no Knative Serving: event ServerlessModeRejected), the wait stops with its reason and this fix
    cluster.hints["InferenceService"] = f"if KServe ignored the annotation: {kserve_mode_fix(ns)}"
    warnings.append(f"KServe's default deployment mode is {mode}; every InferenceService layerbench creates asks "
                    f"for {MODE_ANNOTATION}: RawDeployment, which KServe honours. Should one still wait for Knative, "
                    f"{kserve_mode_fix(ns)}")


def _check_crds(cluster: Cluster, stacks: Iterable[str], objects: list[dict[str, Any]],
                warnings: list[str]) -> None:
    wanted = {(g, k): v for s in stacks for g, k, v in get_stack(s).k8s_crds}
    for o in objects:  # the versions the plan's objects really use win over the defaults above
        group, _, version = str(o.get("apiVersion", "")).rpartition("/")
        if (group, o.get("kind")) in CUSTOM_PLURALS:
            wanted[(group, o["kind"])] = version
    ext = k8s.ApiextensionsV1Api(cluster.api)
    for (group, kind), version in sorted(wanted.items()):
        name = f"{CUSTOM_PLURALS[(group, kind)]}.{group}"
        try:
            crd = _read(ext.read_custom_resource_definition, name)
        except ApiException as e:
            if e.status != 403:
                raise LayerbenchError(f"cannot read CRD {name}: {api_error(e)}") from None
            warnings.append(f"cannot check CRD {name} ({api_error(e)}): creating the {kind} will tell")
            continue
        if crd is None:
            raise LayerbenchError(f"CRD {name} missing: {INSTALL.get(group, 'install its operator')} "
                                  f"(the run creates a {kind})")
        served = [v.get("name") for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")]
        if version not in served:
            raise LayerbenchError(f"CRD {name} does not serve {group}/{version} (served: {', '.join(served) or 'none'}"
                                  f"): upgrade ({INSTALL.get(group, 'its operator')})")
        schema = schema_of_crd(crd, version)
        mine = [o for o in objects if o.get("kind") == kind and str(o.get("apiVersion")) == f"{group}/{version}"]
        problems = [p for o in mine for p in crd_validate(o, schema=schema)] if schema else []
        if problems:  # the cluster's own release of the CRD: what the API server would prune or refuse
            raise LayerbenchError(f"the cluster's CRD {name} refuses the rendered {kind}: " + "; ".join(problems[:5]))


def _gpus(node: dict[str, Any]) -> int:
    try:
        return int(str(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0")))
    except ValueError:
        return 0


def _check_gpus(cluster: Cluster, gpus: int, warnings: list[str]) -> list[dict[str, Any]]:
    """The nodes an engine pod of `gpus` GPUs can be scheduled on; refused when there is none."""
    try:
        nodes = (_read(k8s.CoreV1Api(cluster.api).list_node) or {}).get("items") or []
    except ApiException as e:
        if e.status != 403:
            raise LayerbenchError(f"cannot list nodes: {api_error(e)}") from None
        warnings.append(f"cannot list nodes ({api_error(e)}): not checked that a node has {gpus} {GPU}, nor its "
                        "driver")
        return []
    seen, fit = [], []
    for node in nodes:
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        if _gpus(node) >= gpus and ready and not cordoned:
            fit.append(node)
            continue
        state = " cordoned" if cordoned else ("" if ready else " not Ready")
        seen.append(f"{node['metadata']['name']} {_gpus(node)}{state}")
    if fit:
        return fit
    listed = ", ".join(seen[:8]) + (f", and {len(seen) - 8} more" if len(seen) > 8 else "")
    raise LayerbenchError(f"no node has {GPU} allocatable >= {gpus} (nodes: {listed or 'none'}): install the NVIDIA "
                          f"device plugin (or GPU Operator), uncordon a GPU node, or lower ClusterSettings.gpus")


def _check_room(nodes: list[dict[str, Any]], gpus: int, pods: int) -> None:
    """The schedulable GPU nodes (`nodes`, those that fit one engine pod) must hold a side's `pods` engine pods at
    once: a pod's GPUs are all on its node, so a node of G GPUs holds G // gpus of them. Allocatable counts GPUs that
    other pods use too: this refuses what can never be scheduled, not what is busy now. No nodes (not listable):
    not checked."""
    room = sum(_gpus(node) // gpus for node in nodes)
    if nodes and room < pods:
        listed = ", ".join(f"{node['metadata']['name']} {_gpus(node)}" for node in nodes[:8])
        raise LayerbenchError(f"a side runs {pods} engine pods of {gpus} {GPU} each ({pods * gpus} in all), and the "
                              f"schedulable GPU nodes hold {room} of them (nodes: {listed}): lower engine.replicas "
                              "(REPLICAS=) or tensor_parallel_size, or add GPU nodes")


QUOTA_KEYS = ("requests.nvidia.com/gpu", "limits.nvidia.com/gpu", "nvidia.com/gpu")


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _check_quota(cluster: Cluster, needed: int, what: str) -> None:
    """A ResourceQuota of the namespace must leave room for a side's GPUs (the sides run one after the other)."""
    quotas = (_read(k8s.CoreV1Api(cluster.api).list_namespaced_resource_quota, cluster.namespace) or {}).get("items")
    for q in quotas or []:
        hard, used = (q.get("spec") or {}).get("hard") or {}, (q.get("status") or {}).get("used") or {}
        for key in QUOTA_KEYS:
            if key in hard:
                room = _quantity(hard[key]) - _quantity(used.get(key, 0))
                if room < needed:
                    raise LayerbenchError(
                        f"ResourceQuota {q['metadata']['name']} in namespace {cluster.namespace} leaves {room} of "
                        f"{hard[key]} {key}; {what} needs {needed}: lower replicas or gpus in the cluster config, or "
                        "engine.replicas (REPLICAS=), or raise the quota")


def _references(node: Any) -> Iterator[tuple[str, str]]:
    """(kind, name) of every PVC and Secret a manifest's pod specs use, optional ones left out."""
    if isinstance(node, list):
        for item in node:
            yield from _references(item)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if not isinstance(value, dict | list):
            continue
        if key == "persistentVolumeClaim" and isinstance(value, dict) and value.get("claimName"):
            yield "PersistentVolumeClaim", value["claimName"]
        elif isinstance(value, dict) and not value.get("optional"):
            if key in ("secretKeyRef", "secretRef") and value.get("name"):
                yield "Secret", value["name"]
            elif key == "secret" and value.get("secretName"):
                yield "Secret", value["secretName"]
        elif key == "imagePullSecrets":
            yield from (("Secret", s["name"]) for s in value if isinstance(s, dict) and s.get("name"))
        yield from _references(value)


def _check_references(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    made = {(o.get("kind"), (o.get("metadata") or {}).get("name")) for o in objects}
    core = k8s.CoreV1Api(cluster.api)
    read = {"PersistentVolumeClaim": core.read_namespaced_persistent_volume_claim,
            "Secret": core.read_namespaced_secret}
    for kind, name in sorted(set(_references(objects)) - made):
        try:
            found = _read(read[kind], name, cluster.namespace)
        except ApiException as e:
            raise LayerbenchError(f"cannot check {kind} {cluster.namespace}/{name}: {api_error(e)}") from None
        if found is None:
            raise LayerbenchError(f"{kind} {name} not found in namespace {cluster.namespace}: the run's pods use it; "
                                  f"create it there first (see ClusterSettings.hf_cache_pvc, hf_token_secret)")


def preflight(cluster: Cluster, settings: ClusterSettings, stacks: Iterable[str],
              objects: Iterable[dict[str, Any]] = (), gpus_per_side: int = 0,
              engine_images: Iterable[str] = ()) -> list[str]:
    """Runs every check for a run of `stacks` deploying `objects`, whose GPU pods run `engine_images`; returns
    warnings, raises the first failure. Nothing here pulls an image."""
    stacks, objects = set(stacks), list(objects)
    warnings: list[str] = []
    check_reachable(cluster)
    if _read(k8s.CoreV1Api(cluster.api).read_namespace, cluster.namespace) is None:
        raise LayerbenchError(f"namespace {cluster.namespace} does not exist: create it (kubectl create namespace "
                              f"{cluster.namespace}) or set `namespace` in the cluster config")
    if "kserve" in stacks:
        _check_kserve(cluster, settings, warnings)
    _check_crds(cluster, stacks, objects, warnings)
    gpus = settings.gpus if settings.gpus is not None else 1  # unsettled: one engine rank
    pods = gpus_per_side // gpus if gpus else 0  # a side's engine pods, each asking for `gpus`
    if gpus:
        nodes = _check_gpus(cluster, gpus, warnings)
        _check_room(nodes, gpus, pods)
        if settings.check_driver:
            check_nodes(nodes, list(dict.fromkeys(engine_images)), warnings)
    if gpus_per_side:
        _check_quota(cluster, gpus_per_side, f"a side ({pods} replica(s) x {gpus} GPU(s))")
    _check_references(cluster, objects)
    return warnings


def uses_cache(objects: list[dict[str, Any]], settings: ClusterSettings) -> bool:
    return ("PersistentVolumeClaim", settings.hf_cache_pvc) in set(_references(objects))
