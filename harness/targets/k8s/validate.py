"""Every object a plan would apply, checked offline by three validators: built-in kinds against the
Kubernetes API's own schemas (kubernetes-validate, strict: an unknown field is an error), custom resources
(InferenceService, ServingRuntime, RayService) against their real CRDs (harness.targets.k8s.crds), and all of them
against
layerbench's safety policy (harness.targets.k8s.manifest_policy). One line per problem; [] means the plan may be
applied."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from harness.errors import LayerbenchError
from harness.targets.k8s.crds import validate as crd_validate
from harness.targets.k8s.manifest_policy import check_manifest
from harness.targets.k8s.plan import K8sPlan

CRD_GROUPS = ("serving.kserve.io", "ray.io")  # kinds that live in a CRD, not in the Kubernetes API


def who(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind', '?')}/{(obj.get('metadata') or {}).get('name', '?')}"


def is_custom(obj: dict[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).split("/")[0] in CRD_GROUPS


def builtin_problems(obj: dict[str, Any], k8s_version: str) -> list[str]:
    """The object against the Kubernetes `k8s_version` schema of its kind, strictly (kubernetes-validate): its
    first problem, the one kubernetes-validate reports."""
    return list(_builtin_problems(json.dumps(obj, sort_keys=True), k8s_version))


@functools.lru_cache(maxsize=256)
def _builtin_problems(text: str, k8s_version: str) -> tuple[str, ...]:
    """Keyed by the object's text: a compare's sides share objects, and each check reads the schemas anew."""
    import kubernetes_validate

    obj = json.loads(text)
    try:
        kubernetes_validate.validate(obj, k8s_version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path) or "(root)"
        return (f"{who(obj)}: {path}: {e.message}",)
    except kubernetes_validate.SchemaNotFoundError as e:
        return (f"{who(obj)}: {e.message}",)
    except kubernetes_validate.utils.VersionNotSupportedError:
        raise LayerbenchError(f"kubernetes-validate has no schemas for Kubernetes {k8s_version}") from None
    return ()


def object_problems(objects: list[dict[str, Any]], k8s_version: str, crd_dir: Path | None = None) -> list[str]:
    """Schema problems of each object (its CRD or the Kubernetes API), then the safety policy's."""
    problems: list[str] = []
    for obj in objects:
        problems += crd_validate(obj, crd_dir) if is_custom(obj) else builtin_problems(obj, k8s_version)
    return problems + check_manifest(objects)


def plan_problems(plan: K8sPlan, k8s_version: str, crd_dir: Path | None = None) -> list[str]:
    """Every problem of every side's objects and load Job, each line naming its side."""
    problems = []
    for side in plan.sides:
        for line in object_problems([*side.objects, side.load_job], k8s_version, crd_dir):
            problems.append(f"{side.label} ({side.stack}): {line}")
    return problems
