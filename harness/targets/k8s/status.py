"""What an object's or a pod's status says, as plain functions of the dicts the API server returns: is it
ready, why not, and is it a failure that waiting will not cure. No I/O here; harness.targets.k8s.cluster polls and
these functions judge, so the rules are testable on their own and the same for wait_ready and run_job."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# vLLM's OpenAI server logs the first at startup; its engine core logs the second in every embedding
# (api_server, Ray Serve LLM's replica, Triton's backend) where its log reaches the pod's stdout
_VERSION_LINES = (re.compile(r"vLLM API server version (\S+)"),
                  re.compile(r"Initializing an? (?:V\d )?LLM engine \(v([^)\s]+)\)"))
_TAG_VERSION = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?(?:[.+-][0-9A-Za-z.]+)?)$")
# A container waiting for one of these is not on its way up: an image that cannot be pulled, a config that
# cannot be built (missing Secret key), a process that keeps exiting. Waiting out the timeout would only hide it.
KNATIVE_MODES = ("Knative", "Serverless")
FATAL_WAITING = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff",
})


@dataclass(frozen=True)
class Readiness:
    ready: bool
    detail: str  # one line for the progress display and the timeout message
    fatal: str | None = None  # a failure condition: stop waiting


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def _cond_text(c: dict[str, Any] | None, ctype: str) -> str:
    if c is None:
        return f"no {ctype} condition yet"
    why = ": ".join(x for x in (c.get("reason"), c.get("message")) if x)
    return f"{ctype}={c.get('status')}" + (f" (reason {why})" if why else "")


def _generation_seen(obj: dict[str, Any]) -> bool:
    """The controller has looked at the current spec (a status left from an older spec says nothing)."""
    seen = (obj.get("status") or {}).get("observedGeneration")
    generation = (obj.get("metadata") or {}).get("generation")
    return seen is None or generation is None or seen >= generation


def _knative(status: dict[str, Any]) -> str | None:
    """Why an InferenceService will never serve without Knative, or None: the controller resolved a Knative
    (formerly Serverless) deployment mode for it (status.deploymentMode; KServe pkg/constants: Serverless ->
    Knative), or a condition names Knative or Serverless (without Knative Serving the controller rejects the
    service: event ServerlessModeRejected, pkg/controller/v1beta1/inferenceservice/controller.go)."""
    mode = status.get("deploymentMode")
    if mode in KNATIVE_MODES:
        return (f"KServe resolved deployment mode {mode} for it (status.deploymentMode), which needs Knative "
                "Serving; layerbench asked for RawDeployment by annotation")
    for c in status.get("conditions") or []:
        text = " ".join(str(c.get(k) or "") for k in ("reason", "message"))
        if c.get("status") != "True" and re.search(r"knative|serverless", text, re.I):
            return f"KServe reports {_cond_text(c, str(c.get('type')))}, which needs Knative Serving"
    return None


def readiness(kind: str, obj: dict[str, Any]) -> Readiness:
    status = obj.get("status") or {}
    if kind == "Deployment":
        want = (obj.get("spec") or {}).get("replicas", 1)
        have = status.get("availableReplicas") or 0
        updated = status.get("updatedReplicas") or 0
        current = (status.get("observedGeneration") or 0) >= (obj.get("metadata") or {}).get("generation", 1)
        detail = f"{have}/{want} available"
        failure = condition(obj, "ReplicaFailure")
        if failure and failure.get("status") == "True":  # e.g. a ResourceQuota refused the pods
            detail += f"; {_cond_text(failure, 'ReplicaFailure')}"
        return Readiness(current and have >= want and updated >= want, detail)
    if kind == "InferenceService":
        if knative := _knative(status):
            return Readiness(False, "waits for Knative", fatal=knative)
        model = status.get("modelStatus") or {}
        if model.get("transitionStatus") in ("BlockedByFailedLoad", "InvalidSpec"):
            info = model.get("lastFailureInfo") or {}
            why = ": ".join(x for x in (info.get("reason"), info.get("message")) if x) or "no failure info"
            return Readiness(False, model["transitionStatus"], fatal=f"model {model['transitionStatus']} ({why})")
        c = condition(obj, "Ready")
        ok = c is not None and c.get("status") == "True" and _generation_seen(obj)
        return Readiness(ok, _cond_text(c, "Ready"))
    if kind == "RayService":
        # KubeRay >= 1.3 reports conditions (Ready); older operators only serviceStatus "Running"
        for which in ("activeServiceStatus", "pendingServiceStatus"):
            for app, st in ((status.get(which) or {}).get("applicationStatuses") or {}).items():
                if (st or {}).get("status") == "DEPLOY_FAILED":
                    return Readiness(False, "DEPLOY_FAILED",
                                     fatal=f"Serve application {app} DEPLOY_FAILED: {st.get('message', '')}".strip())
        c = condition(obj, "Ready")
        ok = (c is not None and c.get("status") == "True") or status.get("serviceStatus") == "Running"
        detail = _cond_text(c, "Ready") if c is not None else f"serviceStatus {status.get('serviceStatus') or '-'}"
        return Readiness(ok and _generation_seen(obj), detail)
    if kind == "Job":
        failed = condition(obj, "Failed")
        if failed and failed.get("status") == "True":
            return Readiness(False, "Failed", fatal=_cond_text(failed, "Failed"))
        done = condition(obj, "Complete")
        if done and done.get("status") == "True":
            return Readiness(True, "Complete")
        return Readiness(False, f"active {status.get('active') or 0}, failed {status.get('failed') or 0}")
    return Readiness(True, "exists")  # Service, ConfigMap...: present is all they can be


def pod_selectors(kind: str, name: str, obj: dict[str, Any]) -> list[str]:
    """Label selectors of the pods behind an object, as its controller labels them."""
    if kind == "Deployment":
        match = (((obj.get("spec") or {}).get("selector") or {}).get("matchLabels")) or {}
        return [",".join(f"{k}={v}" for k, v in sorted(match.items()))] if match else []
    return {"InferenceService": [f"serving.kserve.io/inferenceservice={name}"],
            "RayService": [f"ray.io/originated-from-cr-name={name}"],  # KubeRay labels its pods so
            "Job": [f"job-name={name}"]}.get(kind, [])


@dataclass(frozen=True)
class PodProblem:
    pod: str
    text: str
    fatal: bool


def pod_problem(pod: dict[str, Any]) -> PodProblem | None:
    """Why this pod is not serving yet, or None when it is Running and ready (or Succeeded)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    name, phase = meta.get("name", "?"), status.get("phase") or "Pending"
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for cs in containers:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in FATAL_WAITING:
            text = f"{phase}: container {cs.get('name')} {reason}"
            if waiting.get("message"):
                text += f": {waiting['message']}"
            last = (cs.get("lastState") or {}).get("terminated")
            if last:
                text += (f" (last exit: {last.get('reason') or 'terminated'}, code {last.get('exitCode')}, "
                         f"{cs.get('restartCount', 0)} restarts)")
            return PodProblem(name, text, fatal=True)
    if phase == "Succeeded":
        return None
    if phase == "Failed":  # a Deployment replaces it, a Job counts it: say it, let the owner decide
        why = ": ".join(x for x in (status.get("reason"), status.get("message")) if x)
        return PodProblem(name, f"Failed{': ' + why if why else ''}", fatal=False)
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    if scheduled and scheduled.get("status") == "False":
        # Unschedulable is not fatal: a cluster autoscaler may still add the GPU node
        return PodProblem(name, f"{phase}: {scheduled.get('message') or scheduled.get('reason')}", fatal=False)
    for cs in containers:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return PodProblem(name, f"{phase}: container {cs.get('name')} {waiting.get('reason', 'waiting')}",
                              fatal=False)
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if phase == "Running" and ready and ready.get("status") == "True":
        return None
    return PodProblem(name, f"{phase}, not ready", fatal=False)


def version_in_log(text: str) -> str | None:
    """The vLLM version a log says it runs (its last startup, if the log holds several)."""
    hits = [m for rx in _VERSION_LINES for m in rx.finditer(text)]
    return max(hits, key=lambda m: m.start()).group(1) if hits else None


def version_in_image(image: str) -> str | None:
    """The version in the tag of an image whose name says vLLM (vllm/vllm-openai:v0.32.0 -> 0.32.0). Other
    images' tags are their own versions (rayproject/ray-llm:2.60.0 is Ray's), so they say nothing here."""
    repo, _, tag = image.rpartition(":")
    m = _TAG_VERSION.match(tag)
    return m.group(1) if m and "vllm" in repo.rsplit("/", 1)[-1].lower() else None


@dataclass(frozen=True)
class EngineVersion:
    version: str
    source: str  # where it was read: "log of pod x" or "image tag of pod x (vllm/vllm-openai:v0.32.0)"


def pod_engine_version(pod: dict[str, Any], log: Callable[[str, str], str | None]) -> EngineVersion | None:
    """An engine pod's vLLM version: from the line vLLM prints at startup in one of its containers' logs (log(pod,
    container): its text, or None when unreadable), else from the tag of an image whose name says vLLM."""
    name = pod["metadata"]["name"]
    containers = (pod.get("spec") or {}).get("containers") or []
    for c in containers:
        if (text := log(name, c["name"])) is not None and (version := version_in_log(text)):
            return EngineVersion(version, f"log of pod {name}")
    for image in (c.get("image") or "" for c in containers):  # no line in the log (rotated, or not the pod's)
        if version := version_in_image(image):
            return EngineVersion(version, f"image tag of pod {name} ({image})")
    return None
