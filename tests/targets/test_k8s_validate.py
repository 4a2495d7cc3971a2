"""The three validators `--dry-run` runs on every rendered object each reject a wrong field: the Kubernetes
API schema (kubernetes-validate, strict), the CRDs (harness.targets.k8s.crds), and the safety policy."""

from __future__ import annotations

import copy

import pytest

from harness.errors import LayerbenchError
from harness.profile.loading import load_profile
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.validate import builtin_problems, object_problems, plan_problems
from stacks.base import DeploySettings, get_stack

RUN = "20261201-101010-compare-ray-abc123"
PROFILE = load_profile("quick")


def side_objects(kind: str, label: str = "stack", **options) -> list[dict]:
    s = get_stack(kind)(DeploySettings(engine=PROFILE.engine, options=options))
    plan = render_plan(s, PROFILE, ClusterSettings(), RUN, LoadCommand("compare"))
    side = next(x for x in plan.sides if x.label == label)
    return copy.deepcopy([*side.objects, side.load_job])


def find(objects: list[dict], kind: str) -> dict:
    return next(o for o in objects if o["kind"] == kind)


def test_kubernetes_schema_rejects_a_misspelt_field():
    objects = side_objects("vllm")
    dep = find(objects, "Deployment")
    dep["spec"]["replica"] = 1  # replicas
    assert builtin_problems(dep, "1.33") == ["Deployment/lb-stack-vllm-abc123: spec: Additional properties are not "
                                             "allowed ('replica' was unexpected)"]
    del dep["spec"]["replica"]
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = [8000]
    (problem,) = builtin_problems(dep, "1.33")
    assert problem.startswith("Deployment/lb-stack-vllm-abc123: spec.template.spec.containers.0.readinessProbe."
                              "httpGet.port: ")
    job = find(objects, "Job")
    job["spec"]["backofLimit"] = 0
    assert "'backofLimit' was unexpected" in builtin_problems(job, "1.33")[0]


def test_an_unknown_kind_or_version_is_named():
    assert "Couldn't find schema" in builtin_problems({"apiVersion": "v9", "kind": "Nope",
                                                        "metadata": {"name": "x"}}, "1.33")[0]
    with pytest.raises(LayerbenchError, match="no schemas for Kubernetes 1.99"):
        builtin_problems(find(side_objects("vllm"), "Service"), "1.99")


def test_crds_reject_a_misspelt_field():
    ray = side_objects("ray")
    svc = find(ray, "RayService")
    svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replica"] = 1
    kserve = side_objects("kserve", mode="inprocess")
    isvc = find(kserve, "InferenceService")
    isvc["spec"]["predictor"]["model"]["storageURI"] = "hf://x/y"
    problems = object_problems([svc, isvc], "1.33")
    assert len(problems) == 2
    assert "RayService/lb-stack-ray-abc123: spec.rayClusterConfig.workerGroupSpecs.0" in problems[0]
    assert "'replica' was unexpected" in problems[0]
    assert "InferenceService/lb-stack-kserve-abc123: spec.predictor.model" in problems[1]
    assert "'storageURI' was unexpected" in problems[1]


def test_the_safety_policy_rejects_host_network_privileges_and_missing_limits():
    objects = side_objects("triton")
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["initContainers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    del find(objects, "Job")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    problems = [p for p in object_problems(objects, "1.33") if "Additional properties" not in p]
    assert problems == [
        "Deployment/lb-stack-triton-abc123: spec.template.spec: hostNetwork is true",
        "Deployment/lb-stack-triton-abc123: spec.template.spec.initContainers[0] (model-repository): "
        "allowPrivilegeEscalation is true",
        "Job/lb-stack-triton-abc123-load: spec.template.spec.containers[0] (layerbench): "
        "no resources.limits for memory",
    ]


def test_plan_problems_name_the_side():
    s = get_stack("ray")(DeploySettings(engine=PROFILE.engine))
    p = render_plan(s, PROFILE, ClusterSettings(), RUN, LoadCommand("compare"))
    p.sides[0].load_job["spec"]["template"]["spec"]["hostNetwork"] = True
    assert plan_problems(p, "1.33") == ["baseline (vllm): Job/lb-baseline-vllm-abc123-load: spec.template.spec: "
                                        "hostNetwork is true"]
