"""The parts of the Kubernetes API emulator (tests/k8s_emulator.py) that are not HTTP: the kinds it
serves, what a test asks a controller to do (`Behaviour`), what the emulated pods print, label selectors, and the
fake controller itself (`Controller`, mixed into the emulator), which on every request (a tick) makes pods for
Deployments, InferenceServices, RayServices and Jobs and moves their status the way a test asked."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BUILTIN = [  # (path prefix, plural, kind, namespaced)
    ("api/v1", "namespaces", "Namespace", False), ("api/v1", "nodes", "Node", False),
    ("api/v1", "pods", "Pod", True), ("api/v1", "services", "Service", True),
    ("api/v1", "configmaps", "ConfigMap", True), ("api/v1", "secrets", "Secret", True),
    ("api/v1", "serviceaccounts", "ServiceAccount", True),
    ("api/v1", "persistentvolumeclaims", "PersistentVolumeClaim", True),
    ("api/v1", "resourcequotas", "ResourceQuota", True),
    ("apis/apps/v1", "deployments", "Deployment", True), ("apis/batch/v1", "jobs", "Job", True),
    ("apis/apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False),
]
CRDS = {"inferenceservices.serving.kserve.io": ("apis/serving.kserve.io/v1beta1", "inferenceservices",
                                                "InferenceService", True),
        "servingruntimes.serving.kserve.io": ("apis/serving.kserve.io/v1alpha1", "servingruntimes",
                                              "ServingRuntime", True),
        "rayservices.ray.io": ("apis/ray.io/v1", "rayservices", "RayService", True)}
OWNERS = ("Deployment", "InferenceService", "RayService", "Job")
DEFAULT_RAY = "rayproject/ray-llm:2.60.0-py312-cu130"
UNSCHEDULABLE = ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
                 "3 No preemption victims found for incoming pod.")


@dataclass
class Behaviour:
    # ready | never | image_pull | unschedulable | crashloop | fail (Job) | failed_load (ISVC) | knative (ISVC: the
    # controller resolved a Knative mode and, without Knative Serving, made nothing)
    mode: str = "ready"
    version: str = "0.32.0"  # what an engine pod's log says
    log: str | None = None  # a pod's whole log (a Job's results marker goes here)
    image: str | None = None
    logs: list[str] | None = None  # an Indexed Job's pods' logs, by completion index


# What a registry would answer for an image: the vLLM it carries, "harness" (layerbench's own image, no vLLM),
# None (neither), or no entry (not in the registry: its pull fails). Emulator(images=None) pulls any image, with
# the vLLM of its tag.
HARNESS_MARKER = "LAYERBENCH_HARNESS"
MODEL_MARKER = "LAYERBENCH_MODEL"


def engine_log(container: dict[str, Any], version: str) -> str:
    """What vLLM prints at startup in an engine container: its version, its config line (the model and
    tensor-parallel size its command line gave it) and its KV cache."""
    args = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]

    def flag(name: str, default: str) -> str:
        for i, a in enumerate(args):
            if a == name and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        return default

    model, revision = flag("--model", "/mnt/models"), flag("--revision", "None")
    return (f"INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version {version}\n"
            f"INFO 01-01 00:00:01 [core.py:134] Initializing a V1 LLM engine (v{version}) with config: "
            f"model='{model}', speculative_config=None, tokenizer='{model}', revision={revision}, "
            f"tokenizer_revision={revision}, dtype=torch.bfloat16, tensor_parallel_size="
            f"{flag('--tensor-parallel-size', '1')}, pipeline_parallel_size=1\n"
            "INFO 01-01 00:00:09 [kv_cache_utils.py:1] GPU KV cache size: 1,050,624 tokens\n"
            "INFO started\n")


def _probe_log(command: str, image: str, images: dict[str, str | None] | None, models: set[str] | None) -> str:
    """What a preflight probe prints in the emulated image (the probe's own marker lines)."""
    from harness.targets.k8s.images import PROBE_MARKER, known_vllm

    if images is not None and image not in images:
        return ""  # never pulled: nothing ran
    if PROBE_MARKER in command:
        version = images.get(image) if images is not None else (known_vllm(image) or "0.32.0")
        ok = version and version != "harness"
        return f"{PROBE_MARKER} {version}\n" if ok else "ModuleNotFoundError: No module named 'vllm'\n"
    if HARNESS_MARKER in command:
        harness = images is None or images.get(image) == "harness"
        return f"{HARNESS_MARKER} 0.1.0\n" if harness else "ModuleNotFoundError: No module named 'harness'\n"
    if MODEL_MARKER in command:
        found = models is None or any(m in command for m in models)
        return f"{MODEL_MARKER} {'found' if found else 'missing'}\n"
    return ""


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose current context points at `server` (token auth, plain HTTP)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": server}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "users": [{"name": "t", "user": {"token": "x"}}]}))
    return path


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def matches(labels: dict[str, str], selector: str) -> bool:
    """Equality, inequality and existence terms, comma-separated (what the code under test sends)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class Controller:
    """The fake controller of the Emulator, which holds the state named below."""

    store: dict[tuple[str, str, str, str], dict[str, Any]]
    behaviour: dict[str, Behaviour]
    stuck: set[str]
    images: dict[str, str | None] | None
    models: set[str] | None
    ready_after: int
    delete_after: int
    tick_count: int
    _born: dict[str, int]
    _dying: dict[str, int]
    _lock: threading.RLock

    def put(self, prefix: str, plural: str, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def objects(self, kind: str | None = None, selector: str = "") -> list[dict[str, Any]]:
        raise NotImplementedError

    # --- the fake controller ---
    def _tick(self) -> None:
        self.tick_count += 1
        for key, obj in list(self.store.items()):
            uid = obj["metadata"]["uid"]
            if uid in self._dying:
                due = self.tick_count - self._dying[uid] >= self.delete_after
                if due and obj["metadata"]["name"] not in self.stuck:
                    self._remove(key, obj)
            elif obj["kind"] in OWNERS and key in self.store:
                self._reconcile(obj)

    def _remove(self, key: tuple[str, str, str, str], obj: dict[str, Any]) -> None:
        self.store.pop(key, None)
        uid = obj["metadata"]["uid"]
        for k, o in list(self.store.items()):
            owned = any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
            if owned or (obj["kind"] == "Namespace" and k[2] == obj["metadata"]["name"]):
                self._remove(k, o)

    def _pods_of(self, owner: dict[str, Any]) -> list[dict[str, Any]]:
        uid = owner["metadata"]["uid"]
        return [o for o in self.objects("Pod")
                if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]

    def _templates(self, owner: dict[str, Any], b: Behaviour) -> list[tuple[dict[str, str], list[dict]]]:
        """(labels, containers) of each pod an owner would run: a Deployment's replicas, a RayService's head and
        GPU workers, an InferenceService's predictor replicas, an Indexed Job's parallel pods."""
        meta, spec, name = owner["metadata"], owner.get("spec") or {}, owner["metadata"]["name"]
        template = spec.get("template") or {}
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        containers = [dict(c) for c in (template.get("spec") or {}).get("containers") or []]
        if owner["kind"] == "InferenceService":
            labels.update({**(meta.get("labels") or {}), "serving.kserve.io/inferenceservice": name,
                           "component": "predictor"})
            n = (spec.get("predictor") or {}).get("minReplicas") or 1
            return [(labels, [{"name": "kserve-container", "image": "vllm/vllm-openai:v" + b.version}])] * n
        if owner["kind"] == "RayService":
            cluster = spec.get("rayClusterConfig") or {}
            head = (cluster.get("headGroupSpec") or {}).get("template") or {}
            out = [({**((head.get("metadata") or {}).get("labels") or {}), "ray.io/originated-from-cr-name": name,
                     "ray.io/node-type": "head"}, [dict(c) for c in (head.get("spec") or {}).get("containers")
                                                  or [{"name": "ray-head", "image": DEFAULT_RAY}]])]
            for group in cluster.get("workerGroupSpecs") or []:
                t = group.get("template") or {}
                out += [({**((t.get("metadata") or {}).get("labels") or {}), "ray.io/node-type": "worker"},
                         [dict(c) for c in (t.get("spec") or {}).get("containers") or []])] * group.get("replicas", 1)
            return out
        if owner["kind"] == "Job":
            labels.update({"job-name": name, "batch.kubernetes.io/job-name": name, "controller-uid": meta["uid"]})
            return [(labels, containers)] * (spec.get("parallelism") or 1)
        return [(labels, containers)] * (spec.get("replicas") or 1)

    def _log_of(self, owner: dict[str, Any], b: Behaviour, c: dict[str, Any], index: int) -> str:
        if owner["kind"] == "Job":
            if b.logs is not None:
                return b.logs[index] if index < len(b.logs) else ""
            if b.log is not None:
                return b.log
            command = " ".join(str(x) for x in [*(c.get("command") or []), *(c.get("args") or [])])
            return _probe_log(command, c.get("image", ""), self.images, self.models)
        if b.log is not None:
            return b.log
        if c.get("name") == "ray-worker" or c.get("name") == "ray-head":  # Ray's own output: vLLM is not in it
            return "INFO worker.py:1 Connecting to existing Ray cluster\n"
        return engine_log(c, b.version)

    def _make_pods(self, owner: dict[str, Any], b: Behaviour) -> list[dict[str, Any]]:
        meta, name = owner["metadata"], owner["metadata"]["name"]
        pods = []
        for index, (labels, containers) in enumerate(self._templates(owner, b)):
            containers = [dict(c) for c in containers]
            for c in containers:
                c["image"] = b.image or c.get("image") or "busybox"
            logs = {c.get("name", "main"): self._log_of(owner, b, c, index) for c in containers}
            annotations = {"batch.kubernetes.io/job-completion-index": str(index)} if owner["kind"] == "Job" else {}
            pod = {"metadata": {"name": f"{name}-{uuid.uuid4().hex[:5]}", "labels": dict(labels),
                                "annotations": annotations, "ownerReferences": [
                                    {"kind": owner["kind"], "name": name, "uid": meta["uid"]}]},
                   "spec": {"containers": containers, "nodeName": "gpu-1"}, "status": {"phase": "Pending"},
                   "_log": next(iter(logs.values()), ""), "_logs": logs}
            pods.append(self.put("api/v1", "pods", meta["namespace"], pod))
        return pods

    def _pullable(self, pod: dict[str, Any]) -> bool:
        return self.images is None or all(c.get("image") in self.images for c in pod["spec"]["containers"])

    def _reconcile(self, owner: dict[str, Any]) -> None:
        name, kind = owner["metadata"]["name"], owner["kind"]
        b = self.behaviour.get(name, Behaviour())
        if kind == "InferenceService" and b.mode == "knative":  # as KServe's controller leaves it: no pods
            owner["status"] = {"observedGeneration": 1, "deploymentMode": "Knative", "conditions": [
                {"type": "Ready", "status": "Unknown"}, {"type": "PredictorReady", "status": "Unknown"}]}
            return
        pods = self._pods_of(owner) or self._make_pods(owner, b)
        due = self.tick_count - self._born[owner["metadata"]["uid"]] >= self.ready_after
        pullable = all(self._pullable(p) for p in pods)
        if not pullable:  # a tag the registry does not have: the pods' images cannot be pulled
            b = Behaviour(**{**b.__dict__, "mode": "image_pull"})
        job_failed = owner["kind"] == "Job" and due and any(
            "No module named" in p["_log"] for p in pods)
        if job_failed and b.mode == "ready":
            b = Behaviour(**{**b.__dict__, "mode": "fail"})
        ready = b.mode == "ready" and due
        for pod in pods:
            self._pod_state(pod, b, due)
        st: dict[str, Any] = {"observedGeneration": 1}
        if kind == "Deployment":
            n = (owner.get("spec") or {}).get("replicas", 1)
            st.update({"replicas": n, "updatedReplicas": n, **({"availableReplicas": n, "readyReplicas": n}
                                                                 if ready else {"unavailableReplicas": n})})
        elif kind == "InferenceService":
            why = {} if ready else {"reason": "PredictorNotReady", "message": "predictor not ready"}
            st["conditions"] = [{"type": "Ready", "status": "True" if ready else "False", **why}]
            if b.mode == "failed_load" and due:
                st["modelStatus"] = {"transitionStatus": "BlockedByFailedLoad", "lastFailureInfo": {
                    "reason": "ModelLoadFailed", "message": "weights not found"}}
        elif kind == "RayService":
            st["serviceStatus"] = "Running" if ready else ""
            st["conditions"] = [{"type": "Ready", "status": "True" if ready else "False",
                                 "reason": "RayServiceReady" if ready else "Initializing", "message": ""}]
        elif kind == "Job" and due and b.mode in ("ready", "fail"):
            st = {"succeeded": len(pods), "conditions": [{"type": "Complete", "status": "True"}]} \
                if b.mode == "ready" else {
                "failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                             "message": "Job has reached the specified backoff limit"}]}
        elif kind == "Job":
            st = {"active": 1}
        owner["status"] = st

    def _pod_state(self, pod: dict[str, Any], b: Behaviour, due: bool) -> None:
        cname = pod["spec"]["containers"][0]["name"] if pod["spec"]["containers"] else "main"
        image = pod["spec"]["containers"][0].get("image") if pod["spec"]["containers"] else "?"
        waiting = {"ContainerCreating": None}
        if b.mode == "unschedulable":
            pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                                 "reason": "Unschedulable", "message": UNSCHEDULABLE}]}
            return
        if b.mode == "image_pull":
            waiting = {"ImagePullBackOff": f'Back-off pulling image "{image}"'}
        elif b.mode == "crashloop":
            pod["status"] = {"phase": "Running", "containerStatuses": [{
                "name": cname, "ready": False, "restartCount": 4, "state": {"waiting": {
                    "reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}]}
            return
        elif due and b.mode in ("ready", "fail", "failed_load"):
            phase = {"ready": "Running", "fail": "Failed", "failed_load": "Running"}[b.mode]
            if any(r["kind"] == "Job" for r in pod["metadata"]["ownerReferences"]) and b.mode == "ready":
                phase = "Succeeded"
            pod["status"] = {"phase": phase, "conditions": [{"type": "PodScheduled", "status": "True"},
                                                            {"type": "Ready", "status": str(phase == "Running")}],
                             "containerStatuses": [{"name": cname, "ready": phase == "Running",
                                                    "state": {"running": {}}}]}
            return
        (reason, message), = waiting.items()
        pod["status"] = {"phase": "Pending", "containerStatuses": [{"name": cname, "ready": False, "state": {
            "waiting": {"reason": reason, **({"message": message} if message else {})}}}]}
