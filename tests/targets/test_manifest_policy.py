"""The manifest safety policy: small good manifests of every kind pass, and each kind of bad one is named
with the object and the field path (paths as in KServe's and KubeRay's CRDs)."""

from __future__ import annotations

import copy

import pytest
import yaml

from harness.targets.k8s.manifest_policy import check_manifest

LIMITED = {"limits": {"cpu": "2", "memory": "8Gi"}, "requests": {"cpu": "1", "memory": "4Gi"}}
GPU = {"limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}


def container(name: str = "main", **over) -> dict:
    return {"name": name, "image": "vllm/vllm-openai:v0.32.0", "resources": copy.deepcopy(LIMITED), **over}


def pod_spec(**over) -> dict:
    return {"containers": [container()], **over}


GOOD = yaml.safe_load_all(f"""
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec: {pod_spec(initContainers=[container("fetch")])}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: d}}
spec: {{template: {{spec: {pod_spec(containers=[container(resources=GPU, securityContext={
    "allowPrivilegeEscalation": False, "privileged": False, "runAsNonRoot": True})])}}}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: s}}
spec: {{template: {{spec: {pod_spec(hostNetwork=False)}}}}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: j}}
spec: {{template: {{spec: {pod_spec()}}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: svc}}
spec: {{ports: [{{port: 8000}}]}}
---
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {{name: isvc}}
spec:
  predictor:
    model: {{modelFormat: {{name: huggingface}}, runtime: vllm, resources: {GPU}}}
    workerSpec: {{tensorParallelSize: 1, containers: [{container("worker")}]}}
  transformer: {pod_spec()}
---
apiVersion: ray.io/v1
kind: RayService
metadata: {{name: rs}}
spec:
  serveConfigV2: ""
  rayClusterConfig:
    headGroupSpec: {{rayStartParams: {{}}, template: {{spec: {pod_spec()}}}}}
    workerGroupSpecs:
    - {{groupName: gpu, template: {{spec: {pod_spec(containers=[container(resources=GPU)])}}}}}
    autoscalerOptions: {{securityContext: {{allowPrivilegeEscalation: false}}}}
""")
GOOD = [d for d in GOOD if d]


def test_good_manifests_pass():
    assert check_manifest(GOOD) == []
    assert check_manifest([None, {}, {"kind": "ConfigMap", "data": {"a": "b"}}]) == []  # empty docs, no pods


def only(kind: str) -> dict:
    return copy.deepcopy(next(d for d in GOOD if d["kind"] == kind))


def test_host_network():
    dep = only("Deployment")
    dep["spec"]["template"]["spec"]["hostNetwork"] = True
    assert check_manifest([dep]) == ["Deployment/d: spec.template.spec: hostNetwork is true"]


def test_privileged_and_privilege_escalation():
    pod = only("Pod")
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    pod["spec"]["initContainers"][0]["securityContext"] = {"allowPrivilegeEscalation": True}
    assert check_manifest([pod]) == [
        "Pod/p: spec.initContainers[0] (fetch): allowPrivilegeEscalation is true",
        "Pod/p: spec.containers[0] (main): privileged container",
    ]


@pytest.mark.parametrize(("resources", "missing"), [
    (None, "cpu, memory"),
    ({"requests": {"cpu": "1", "memory": "1Gi"}}, "cpu, memory"),  # requests are not limits
    ({"limits": {"memory": "1Gi"}}, "cpu"),
    ({"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}, "memory"),  # a GPU limit does not replace memory
])
def test_missing_limits(resources, missing):
    job = only("Job")
    c = job["spec"]["template"]["spec"]["containers"][0]
    c.pop("resources")
    if resources is not None:
        c["resources"] = resources
    assert check_manifest([job]) == [
        f"Job/j: spec.template.spec.containers[0] (main): no resources.limits for {missing}"]


def test_inference_service_predictor_and_worker():
    isvc = only("InferenceService")
    pred = isvc["spec"]["predictor"]
    pred["hostNetwork"] = True
    pred["model"]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    pred["model"]["securityContext"] = {"privileged": True}
    pred["workerSpec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": True}
    pred["containers"] = [{"name": "sidecar", "image": "x"}]
    assert check_manifest([isvc]) == [
        "InferenceService/isvc: spec.predictor: hostNetwork is true",
        "InferenceService/isvc: spec.predictor.containers[0] (sidecar): no resources.limits for cpu, memory",
        "InferenceService/isvc: spec.predictor.workerSpec.containers[0] (worker): allowPrivilegeEscalation is true",
        "InferenceService/isvc: spec.predictor.model: privileged container",
        "InferenceService/isvc: spec.predictor.model: no resources.limits for cpu, memory",
    ]


def test_rayservice_head_and_worker_groups():
    rs = only("RayService")
    cluster = rs["spec"]["rayClusterConfig"]
    cluster["headGroupSpec"]["template"]["spec"]["hostNetwork"] = True
    cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    cluster["autoscalerOptions"]["securityContext"] = {"privileged": True}
    assert check_manifest([rs]) == [
        "RayService/rs: spec.rayClusterConfig.headGroupSpec.template.spec: hostNetwork is true",
        "RayService/rs: spec.rayClusterConfig.workerGroupSpecs[0].template.spec.containers[0] (main): "
        "privileged container",
        "RayService/rs: spec.rayClusterConfig.autoscalerOptions: privileged container",
    ]


def test_raycluster_and_lists_and_unknown_templated_kinds():
    rc = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
          "spec": copy.deepcopy(only("RayService")["spec"]["rayClusterConfig"])}
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].pop("resources")
    other = {"kind": "SomeOperatorWorkload", "metadata": {"name": "w"},
             "spec": {"template": {"spec": pod_spec(hostNetwork=True)}}}
    assert check_manifest([{"kind": "List", "items": [rc, other]}]) == [
        "RayCluster/rc: spec.workerGroupSpecs[0].template.spec.containers[0] (main): "
        "no resources.limits for cpu, memory",
        "SomeOperatorWorkload/w: spec.template.spec: hostNetwork is true",
    ]


def test_serving_runtime_containers():
    rt = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
          "metadata": {"name": "vllm"}, "spec": {"containers": [{"name": "kserve-container", "image": "x"}]}}
    assert check_manifest([rt]) == [
        "ClusterServingRuntime/vllm: spec.containers[0] (kserve-container): no resources.limits for cpu, memory"]
