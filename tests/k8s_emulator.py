"""A small Kubernetes API server emulator for tests of stacks.k8s: the real `kubernetes` client talks HTTP to
it on 127.0.0.1. It stores objects by path (create, get, list with label selectors, delete, 404/409 with
Status bodies), serves discovery, CRDs, nodes and pod logs, and has a fake controller that, on every request
(a tick), makes pods for Deployments, InferenceServices, RayServices and Jobs and moves their status the way
a test asked (`behave`): ready after a few ticks, never, ImagePullBackOff, Unschedulable, CrashLoopBackOff,
a failed Job or model load. Deletion takes `delete_after` ticks (foreground: owner and pods go together).
Nothing here waits on wall-clock time: status moves with requests, so tests poll fast and stay exact."""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml
from kubernetes import client as k8s

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
    from stacks.k8s.images import PROBE_MARKER, known_vllm

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


class Emulator:
    def __init__(self, *, crds: tuple[str, ...] = tuple(CRDS), ready_after: int = 3, delete_after: int = 2,
                 gpu_nodes: dict[str, int] | None = None, kserve_mode: str | None = "RawDeployment",
                 namespaces: tuple[str, ...] = ("default", "layerbench"),
                 images: dict[str, str | None] | None = None, models: set[str] | None = None,
                 node_labels: dict[str, dict[str, str]] | None = None):
        """images: the registry (image -> the vLLM it carries; None: any image pulls); models: 'repo@revision'
        entries the HF cache PVC holds (None: every model); node_labels: labels of the GPU nodes by name (GPU
        feature discovery's)."""
        self.images, self.models = images, models
        self.resources = BUILTIN + [CRDS[c] for c in crds]
        self.ready_after, self.delete_after = ready_after, delete_after
        self.store: dict[tuple[str, str, str, str], dict[str, Any]] = {}  # (prefix, plural, ns, name)
        self.behaviour: dict[str, Behaviour] = {}
        self.fail_delete: dict[str, int] = {}  # object name -> HTTP status its DELETE answers
        self.stuck: set[str] = set()  # objects whose deletion never finishes (a finalizer nobody removes)
        self.flaky: dict[str, int] = {}  # object name -> how many more requests naming it answer 503
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.created: list[dict[str, Any]] = []  # every object a client created, as it was sent
        self.tick_count = 0
        self._born: dict[str, int] = {}  # uid -> tick created
        self._dying: dict[str, int] = {}  # uid -> tick deleted
        self._lock = threading.RLock()
        for ns in namespaces:
            self.put("api/v1", "namespaces", "", {"metadata": {"name": ns}})
        for name, gpus in (gpu_nodes if gpu_nodes is not None else {"gpu-1": 1}).items():
            self.put("api/v1", "nodes", "", {"metadata": {"name": name, "labels": dict((node_labels or {}).get(
                name, {}))}, "spec": {}, "status": {
                "allocatable": {"cpu": "16", "nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True"}]}})
        for c in crds:
            prefix, plural, kind, _ = CRDS[c]
            self.put("apis/apiextensions.k8s.io/v1", "customresourcedefinitions", "", {
                "metadata": {"name": c}, "spec": {"group": prefix.split("/")[1], "names": {"kind": kind,
                 "plural": plural}, "scope": "Namespaced", "versions": [
                     {"name": prefix.split("/")[2], "served": True, "storage": True}]}})
        if kserve_mode is not None:
            self.put("api/v1", "namespaces", "", {"metadata": {"name": "kserve"}})
            self.put("api/v1", "configmaps", "kserve", {"metadata": {"name": "inferenceservice-config"},
                     "data": {"deploy": json.dumps({"defaultDeploymentMode": kserve_mode})}})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # --- lifecycle ---
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Emulator:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def api_client(self) -> k8s.ApiClient:
        cfg = k8s.Configuration()
        cfg.host = self.url
        return k8s.ApiClient(cfg)

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- test hooks ---
    def behave(self, name: str, mode: str = "ready", **kw: Any) -> None:
        self.behaviour[name] = Behaviour(mode, **kw)

    def put(self, prefix: str, plural: str, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("generation", 1)
        meta.setdefault("creationTimestamp", f"2026-01-01T00:00:{len(self.store) % 60:02d}Z")
        if ns:
            meta["namespace"] = ns
        kind = next(r[2] for r in self.resources if r[:2] == (prefix, plural))
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", prefix.split("/", 1)[1])
        self._born[meta["uid"]] = self.tick_count
        self.store[(prefix, plural, ns, meta["name"])] = obj
        return obj

    def objects(self, kind: str | None = None, selector: str = "") -> list[dict[str, Any]]:
        with self._lock:
            return [o for o in self.store.values() if (kind is None or o["kind"] == kind)
                    and matches(o["metadata"].get("labels") or {}, selector)]

    def labelled(self, run_label: str) -> list[str]:
        """Every object still stored that carries the run's label: what a clean run leaves is []."""
        return [f"{o['kind']}/{o['metadata']['name']}" for o in self.objects(selector=f"layerbench.io/run={run_label}")]

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

    # --- HTTP ---
    def _discovery(self, path: str) -> dict[str, Any] | None:
        if path == "/version":
            return {"major": "1", "minor": "31", "gitVersion": "v1.31.0-emulated"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for prefix, *_ in self.resources:
                if prefix.startswith("apis/"):
                    _, g, v = prefix.split("/")
                    if v not in groups.setdefault(g, []):
                        groups[g].append(v)
            return {"kind": "APIGroupList", "groups": [{"name": g, "versions": [
                {"groupVersion": f"{g}/{v}", "version": v} for v in vs], "preferredVersion": {
                "groupVersion": f"{g}/{vs[0]}", "version": vs[0]}} for g, vs in groups.items()]}
        mine = [r for r in self.resources if "/" + r[0] == path]
        if mine:
            res = [{"name": p, "singularName": k.lower(), "namespaced": n, "kind": k,
                    "verbs": ["create", "delete", "get", "list"]} for _, p, k, n in mine]
            if path == "/api/v1":
                res.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
                            "verbs": ["get"]})
            return {"kind": "APIResourceList", "groupVersion": path.split("/", 2)[-1], "resources": res}
        return None

    def handle(self, method: str, raw_path: str, body: bytes) -> tuple[int, str, bytes]:
        url = urlsplit(raw_path)
        query = parse_qs(url.query)
        with self._lock:
            self.requests.append((method, url.path, query))
            self._tick()
            code, out = self._route(method, url.path, query, json.loads(body) if body else None)
        if isinstance(out, str):
            return code, "text/plain", out.encode()
        return code, "application/json", json.dumps(out).encode()

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if method == "GET" and (found := self._discovery(path)) is not None:
            return 200, found
        parts = path.strip("/").split("/")
        split = 2 if parts[0] == "api" else 3
        prefix, rest = "/".join(parts[:split]), parts[split:]
        ns, sub = "", None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        plural, name = rest[0] if rest else "", rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        res = next((r for r in self.resources if r[:2] == (prefix, plural)), None)
        if res is None:
            return 404, _status(404, "NotFound", f"the server could not find the requested resource ({path})")
        if ns and ("api/v1", "namespaces", "", ns) not in self.store and method == "POST":
            return 404, _status(404, "NotFound", f'namespaces "{ns}" not found')
        key = (prefix, plural, ns, name or "")
        if self.flaky.get(name or "", 0) > 0:
            self.flaky[name or ""] -= 1
            return 503, _status(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        if method == "POST" and name is None:
            name = (body.get("metadata") or {}).get("name")
            if (prefix, plural, ns, name) in self.store:
                return 409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists')
            self.created.append(json.loads(json.dumps(body)))
            stored = self.put(prefix, plural, ns, json.loads(json.dumps(body)))
            return 201, stored
        if method == "GET" and name is None:
            selector = (query.get("labelSelector") or [""])[0]
            items = [o for k, o in self.store.items() if k[:2] == (prefix, plural) and (not ns or k[2] == ns)
                     and matches(o["metadata"].get("labels") or {}, selector)]
            return 200, {"kind": res[2] + "List", "apiVersion": prefix.split("/", 1)[1],
                         "metadata": {"resourceVersion": str(self.tick_count)},
                         "items": [{k: v for k, v in o.items() if not k.startswith("_")} for o in items]}
        obj = self.store.get(key)
        if obj is None:
            return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
        if method == "GET" and sub == "log":
            container = (query.get("container") or [None])[0]
            return 200, (obj.get("_logs") or {}).get(container, obj.get("_log", ""))
        if method == "GET":
            return 200, {k: v for k, v in obj.items() if not k.startswith("_")}
        if method == "DELETE":
            if name in self.fail_delete:
                code = self.fail_delete[name]
                return code, _status(code, "InternalError", "etcdserver: request timed out")
            policy = (query.get("propagationPolicy") or [(body or {}).get("propagationPolicy", "")])[0]
            obj["metadata"].setdefault("deletionTimestamp", "2026-01-01T00:01:00Z")
            obj["_policy"] = policy
            self._dying.setdefault(obj["metadata"]["uid"], self.tick_count)
            return 200, {k: v for k, v in obj.items() if not k.startswith("_")}
        return 405, _status(405, "MethodNotAllowed", f"{method} is not emulated")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        emu = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                code, ctype, data = emu.handle(self.command, self.path, self.rfile.read(length) if length else b"")
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

            def log_message(self, *args: Any) -> None:  # quiet: pytest shows failures, not access logs
                pass

        return Handler
