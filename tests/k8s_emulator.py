"""A small Kubernetes API server emulator for tests of harness.targets.k8s: the real `kubernetes` client talks HTTP to
it on 127.0.0.1. It stores objects by path (create, get, list with label selectors, delete, 404/409 with
Status bodies), serves discovery, CRDs, nodes and pod logs, and has a fake controller (its Controller, in
tests/k8s_emulator_objects.py) that, on every request (a tick), makes pods for Deployments, InferenceServices,
RayServices and Jobs and moves their status the way a test asked (`behave`): ready after a few ticks, never,
ImagePullBackOff, Unschedulable, CrashLoopBackOff, a failed Job or model load. Deletion takes `delete_after` ticks
(foreground: owner and pods go together). Nothing here waits on wall-clock time: status moves with requests, so
tests poll fast and stay exact."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client as k8s

from tests.k8s_emulator_objects import BUILTIN, CRDS, Behaviour, Controller, _status, matches, write_kubeconfig

__all__ = ["Behaviour", "Emulator", "write_kubeconfig"]  # what tests import from here


class Emulator(Controller):
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
        # (plural, namespace, name) the kubeconfig's user may not read: a GET answers 403 Forbidden as the apiserver
        # words it (k8s.io/apiserver endpoints/handlers/responsewriters/errors.go forbiddenMessage; apimachinery
        # pkg/api/errors/errors.go NewForbidden: reason Forbidden, details name and kind)
        self.forbidden: set[tuple[str, str, str]] = set()
        self.user = "system:serviceaccount:layerbench:runner"
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
        if method == "GET" and (plural, ns, name or "") in self.forbidden:
            where = f'in the namespace "{ns}"' if ns else "at the cluster scope"
            group = prefix.split("/")[1] if prefix.startswith("apis/") else ""
            return 403, {**_status(403, "Forbidden", f'{plural} "{name}" is forbidden: User "{self.user}" cannot get '
                                   f'resource "{plural}" in API group "{group}" {where}'),
                         "details": {"name": name, "kind": plural}}
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
