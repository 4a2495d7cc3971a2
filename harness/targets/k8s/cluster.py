"""The Kubernetes target's cluster side: apply what one side of a K8sPlan deploys, wait until it serves, read
the engine's version and the pods' logs, run the load Job and read its log, and delete exactly what this
run created, waiting until it is gone so the GPU is free for the next side.

Everything goes over HTTP through the official `kubernetes` client: built-in kinds through its dynamic client
(the typed client re-validates a dict against its own models and refuses valid manifests, e.g. a quantity
given as an int, while the plan's dicts are exactly what the API server must get), custom resources
(InferenceService, ServingRuntime, RayService) through CustomObjectsApi, pods and logs through CoreV1Api.
No exec, no port-forward: an API server, or an emulator of its HTTP API, is all this needs."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from harness.errors import LayerbenchError
from harness.targets.k8s import kubeapi
from harness.targets.k8s import status as st
from harness.targets.k8s.kubeapi import RUN_LABEL, JobFailed, Ref, Unreachable, api_error, unreachable
from harness.targets.k8s.plan import Side
from harness.targets.k8s.status import EngineVersion


@dataclass(frozen=True)
class JobRun:
    name: str
    pod: str
    log: str
    seconds: float
    logs: dict[str, str]  # every succeeded pod's log, in completion-index order (parallel load pods)


class Cluster:
    """One run's view of a cluster: what it created (in order), in which namespace, under which run id."""

    def __init__(self, namespace: str, run_id: str, client: k8s.ApiClient, *, poll_s: float = 2.0,
                 request_timeout_s: float = 30.0):
        self.namespace, self.run_id, self.api = namespace, run_id, client
        self.run_label = kubeapi.run_label_value(run_id)
        self.poll_s, self.timeout = poll_s, request_timeout_s
        self.core = k8s.CoreV1Api(client)
        self.custom_api = k8s.CustomObjectsApi(client)
        self._created: list[Ref] = []
        self._pod_selectors: list[str] = [f"{RUN_LABEL}={self.run_label}"]  # pods to see gone after delete
        self._dyn: DynamicClient | None = None
        self.hints: dict[str, str] = {}  # kind -> what to change when an object of it fails or times out (preflight)

    @classmethod
    def connect(cls, namespace: str, run_id: str, kubeconfig: str | Path | None = None,
                context: str | None = None, **kwargs: Any) -> Cluster:
        """A Cluster on the kubeconfig's current (or given) context; see kubeapi.resolve_kubeconfig."""
        return cls(namespace, run_id, kubeapi.api_client(kubeconfig, context), **kwargs)

    @property
    def host(self) -> str:
        return self.api.configuration.host

    @property
    def created(self) -> list[Ref]:
        return list(self._created)

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- one object -------------------------------------------------------------------------------
    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """An API call; a cluster that cannot be reached becomes one clear message."""
        try:
            return fn(*args, _request_timeout=self.timeout, **kwargs)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise unreachable(self.host, e) from None

    def _resource(self, ref: Ref) -> Any:
        if self._dyn is None:
            # the dynamic client caches discovery in a file, shared in /tmp by default: give it a private one
            # that is gone at once (its later writes fail quietly, by design) so nothing is left behind
            try:
                with tempfile.TemporaryDirectory(prefix="layerbench-k8s-") as tmp:
                    self._dyn = DynamicClient(self.api, cache_file=os.path.join(tmp, "discovery.json"))
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise unreachable(self.host, e) from None
        try:
            return self._dyn.resources.get(api_version=ref.api_version, kind=ref.kind)
        except ResourceNotFoundError:
            raise LayerbenchError(f"the cluster serves no {ref.kind} in {ref.api_version} (for {ref})") from None

    def _dyn_call(self, verb: str, ref: Ref, **kwargs: Any) -> Any:
        res = self._resource(ref)
        return self._call(getattr(self._dyn, verb), res, namespace=ref.namespace, **kwargs)

    def _create(self, ref: Ref, body: dict[str, Any]) -> None:
        if c := ref.custom:
            self._call(self.custom_api.create_namespaced_custom_object, c[0], c[1], ref.namespace, c[2], body)
        else:
            self._dyn_call("create", ref, body=body)

    def get(self, ref: Ref) -> dict[str, Any] | None:
        """The object as the server has it, None when it does not exist."""
        try:
            if c := ref.custom:
                return self._call(self.custom_api.get_namespaced_custom_object, c[0], c[1], ref.namespace, c[2],
                                  ref.name)
            return self._dyn_call("get", ref, name=ref.name).to_dict()
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _delete(self, ref: Ref) -> None:
        # Foreground: the object stays until its dependents (ReplicaSets, pods) are gone, so "404" below
        # means the engine pods are gone too, not merely orphaned and terminating
        if c := ref.custom:
            self._call(self.custom_api.delete_namespaced_custom_object, c[0], c[1], ref.namespace, c[2], ref.name,
                       propagation_policy="Foreground")
        else:
            self._dyn_call("delete", ref, name=ref.name, propagation_policy="Foreground")

    def ref(self, kind: str, name: str) -> Ref:
        """What (kind, name) from Side.ready means: an object this run created, else the usual API version."""
        for r in self._created:
            if (r.kind, r.name) == (kind, name):
                return r
        known = kubeapi.DEFAULT_API_VERSION
        if kind not in known:
            raise LayerbenchError(f"cannot watch {kind}/{name}: unknown kind (known: {', '.join(known)})")
        return Ref(kind, known[kind], name, self.namespace)

    # --- apply ------------------------------------------------------------------------------------
    def labelled(self, obj: dict[str, Any]) -> dict[str, Any]:
        return kubeapi.with_labels(obj, self.run_label)

    def apply(self, objects: list[dict[str, Any]]) -> list[Ref]:
        """Creates each object in order; remembers each for delete(). An object that already exists is a
        previous run's leftover (or someone else's): refused, and never deleted by this run."""
        refs = []
        for obj in objects:
            body = self.labelled(obj)
            meta, kind = body["metadata"], body.get("kind", "?")
            namespace = None if kind == "Namespace" else meta.setdefault("namespace", self.namespace)
            ref = Ref(kind, body.get("apiVersion", "v1"), meta.get("name", "?"), namespace)
            if not ref.custom:
                self._resource(ref)  # a kind the cluster does not serve was never created: nothing to delete
            self._created.append(ref)  # before the call: a create whose answer was lost may still have happened
            try:
                self._create(ref, body)
            except ApiException as e:
                if e.status == 409:
                    self._created.remove(ref)
                    if kind == "Namespace":
                        continue  # an existing namespace is fine: it is only where the run deploys
                    owner = ((self.get(ref) or {}).get("metadata") or {}).get("labels", {}).get(RUN_LABEL)
                    raise LayerbenchError(
                        f"{ref} already exists in namespace {namespace}"
                        + (f" (left by run {owner})" if owner else " (not made by layerbench)")
                        + f": delete it (kubectl delete {kind.lower()} {ref.name} -n {namespace}) and retry") from None
                raise LayerbenchError(f"cannot create {ref}: {api_error(e)}") from None
            refs.append(ref)
        return refs

    # --- waiting ----------------------------------------------------------------------------------
    def _progress(self, console: Console | None) -> Progress:
        return Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), TimeElapsedColumn(),
                        console=console or Console(stderr=True), transient=True)

    def pods(self, selector: str) -> list[dict[str, Any]]:
        resp = self._call(self.core.list_namespaced_pod, self.namespace, label_selector=selector,
                          _preload_content=False)
        return json.loads(resp.data).get("items") or []

    def _poll(self, pending: list[Ref], detail: dict[Ref, str], selectors: list[str]) -> dict[Ref, list[str]]:
        """One look at the objects still pending (the ready ones leave `pending`) and at their pods; raises
        on a failure condition or a fatal pod state. Returns what the pods say, by the object they serve."""
        owners: list[tuple[str, Ref]] = []
        for r in list(pending):
            try:
                obj = self.get(r)
            except ApiException as e:
                if e.status < 500 and e.status != 429:
                    raise LayerbenchError(f"cannot read {r}: {api_error(e)}") from None
                raise
            if obj is None:
                continue  # not there yet: KServe makes its predictor Deployment a little after the ISVC
            state = st.readiness(r.kind, obj)
            if state.fatal:
                raise LayerbenchError(f"{r}: {state.fatal}" + (f"; {h}" if (h := self.hints.get(r.kind)) else ""))
            detail[r] = state.detail
            if state.ready:
                pending.remove(r)
            else:
                owners += [(s, r) for s in st.pod_selectors(r.kind, r.name, obj)]
        if pending:
            owners += [(s, pending[0]) for s in selectors]  # the side's engine pods: the first still waiting
        problems: dict[Ref, list[str]] = {}
        seen: set[str] = set()
        for selector, owner in owners:
            for pod in self.pods(selector):
                name = pod["metadata"]["name"]
                if name not in seen and (p := st.pod_problem(pod)):
                    seen.add(name)
                    if p.fatal:
                        raise LayerbenchError(f"{owner} cannot become ready: pod {p.pod} {p.text}")
                    problems.setdefault(owner, []).append(f"pod {p.pod} {p.text}")
        return problems

    def _wait(self, refs: list[Ref], timeout_s: float, console: Console | None, title: str,
              selectors: list[str]) -> float:
        """Polls until every ref is ready. A failure condition on an object or a fatal pod state (image
        cannot be pulled, crash loop) ends the wait at once; otherwise the timeout names the first object
        still waiting, what its status says and what its pods say. API errors that may pass (5xx, 429, a
        dropped connection) are retried until the timeout."""
        t0 = time.monotonic()
        pending, detail = list(refs), {r: "not created yet" for r in refs}
        problems: dict[Ref, list[str]] = {}
        with self._progress(console) as progress:
            tasks = {r: progress.add_task(f"{title}: {r}", total=None) for r in refs}
            while True:
                try:
                    problems = self._poll(pending, detail, selectors)
                except (Unreachable, ApiException) as e:
                    if pending:
                        detail[pending[0]] = f"API error ({api_error(e)})"
                for r in refs:
                    progress.update(tasks[r], description=f"{title}: {r}: {detail[r] if r in pending else 'ready'}")
                elapsed = time.monotonic() - t0
                if not pending:
                    return elapsed
                if elapsed >= timeout_s:
                    r = pending[0]
                    pods = "".join(f"; {p}" for p in problems.get(r, [])[:3])
                    hint = f"; {h}" if (h := self.hints.get(r.kind)) else ""
                    raise LayerbenchError(f"{r} not ready after {timeout_s:g} s: {detail[r]}{pods}{hint}")
                time.sleep(min(self.poll_s, max(timeout_s - elapsed, 0.0)))

    def wait_ready(self, side: Side, timeout_s: float, console: Console | None = None) -> float:
        """Blocks until every (kind, name) in side.ready is ready; returns seconds waited."""
        if side.engine_selector not in self._pod_selectors:
            self._pod_selectors.append(side.engine_selector)
        refs = [self.ref(kind, name) for kind, name in side.ready]
        return self._wait(refs, timeout_s, console, side.label, [side.engine_selector])

    # --- what runs --------------------------------------------------------------------------------
    def log(self, pod: str, container: str | None = None, limit_bytes: int | None = None) -> str:
        kwargs: dict[str, Any] = {"container": container} if container else {}
        if limit_bytes:
            kwargs["limit_bytes"] = limit_bytes
        resp = self._call(self.core.read_namespaced_pod_log, pod, self.namespace, _preload_content=False, **kwargs)
        return resp.data.decode("utf-8", errors="replace")

    def pod_logs(self, selector: str) -> dict[str, str]:
        """Every container's log of the pods matching `selector`: key "pod", or "pod/container" where a pod
        has several. A log that cannot be read (pod gone, container not started) becomes its error text."""
        out: dict[str, str] = {}
        for pod in self.pods(selector):
            name = pod["metadata"]["name"]
            spec = pod.get("spec") or {}
            containers = [c["name"] for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
            for c in containers or [None]:
                key = name if len(containers) <= 1 else f"{name}/{c}"
                try:
                    out[key] = self.log(name, c)
                except ApiException as e:
                    out[key] = f"(log not readable: {api_error(e)})"
        return out

    def engine_version(self, side: Side) -> EngineVersion:
        """The vLLM version the side's engine pods really run. Read from their logs (the line vLLM prints at
        startup; pods exec is not used: it needs a websocket the plain HTTP API does not give), else from the
        tag of a container image whose name says vLLM (vllm/vllm-openai:v0.32.0). The log is measured, the
        tag is declared: the source says which one was used."""
        pods = self.pods(side.engine_selector)
        if not pods:
            raise LayerbenchError(f"{side.label}: no engine pod matches {side.engine_selector!r}")
        def first_mib(pod: str, container: str) -> str | None:  # the version line is at the start
            try:
                return self.log(pod, container, limit_bytes=1 << 20)
            except ApiException:
                return None

        found = {p["metadata"]["name"]: v for p in pods if (v := st.pod_engine_version(p, first_mib)) is not None}
        if not found:
            raise LayerbenchError(f"{side.label}: cannot tell the vLLM version of pods "
                                  f"{', '.join(p['metadata']['name'] for p in pods)}: no 'vLLM API server version' "
                                  f"or 'LLM engine (v...)' line in their logs and no vllm image with a version tag")
        versions = {v.version for v in found.values()}
        if len(versions) > 1:
            raise LayerbenchError(f"{side.label}: engine pods disagree on the vLLM version: "
                                  + ", ".join(f"{p} {v.version}" for p, v in found.items()))
        return next(iter(found.values()))

    def run_job(self, job: dict[str, Any], timeout_s: float, console: Console | None = None) -> JobRun:
        """Creates the load Job, waits for it to complete and returns the log of its succeeded pod (where the
        results marker is: harness.targets.k8s.jobresults). A failed Job raises JobFailed: the tail of its pod's log in
        the message, the whole logs beside it."""
        return self.finish_job(self.start_job(job), timeout_s, console)

    def start_job(self, job: dict[str, Any]) -> Ref:
        (ref,) = self.apply([job])
        self._pod_selectors.append(f"job-name={ref.name}")
        return ref

    def finish_job(self, ref: Ref, timeout_s: float, console: Console | None = None) -> JobRun:
        """Waits for a started Job; its succeeded pods' logs, by completion index (an Indexed Job has several)."""
        selector = f"job-name={ref.name}"
        try:
            seconds = self._wait([ref], timeout_s, console, "job", [])
        except LayerbenchError as e:
            logs = self.pod_logs(selector)
            tails = [f"--- {pod} (last 20 lines) ---\n" + "\n".join(text.splitlines()[-20:])
                     for pod, text in logs.items()]
            raise JobFailed("\n".join([str(e), *tails]), logs) from None
        done = [p for p in self.pods(selector) if (p.get("status") or {}).get("phase") == "Succeeded"]
        if not done:
            raise LayerbenchError(f"{ref} completed but no pod of it is left to read the results from")
        done.sort(key=lambda p: (int(((p["metadata"].get("annotations") or {}).get(
            "batch.kubernetes.io/job-completion-index")) or 0), p["metadata"].get("creationTimestamp") or ""))
        logs = {}
        for pod in done:
            containers = (pod.get("spec") or {}).get("containers") or [{}]
            logs[pod["metadata"]["name"]] = self.log(pod["metadata"]["name"], containers[0].get("name"))
        last = done[-1]["metadata"]["name"]
        return JobRun(ref.name, last, logs[last], seconds, logs)

    # --- delete -----------------------------------------------------------------------------------
    def delete(self, timeout_s: float, console: Console | None = None) -> None:
        """Deletes what this run created (newest first, foreground propagation) and waits until each object
        and every pod of the run is gone. A DELETE the API server could not take (5xx, 429, no connection)
        is sent again until the timeout; a refused one (403) is not. Goes on past every error and raises
        once at the end naming all of them; what failed stays in `created` for another try."""
        errors: list[str] = []
        unsent, pending, failed = list(reversed(self._created)), [], []
        last: dict[Ref, str] = {}
        pods: list[str] = []
        t0 = time.monotonic()
        with self._progress(console) as progress:
            task = progress.add_task("deleting", total=None)
            while True:
                for ref in list(unsent):
                    try:
                        self._delete(ref)
                        pending.append(ref)
                    except (ApiException, LayerbenchError) as e:
                        status = getattr(e, "status", 0)
                        if isinstance(e, Unreachable) or status >= 500 or status == 429:
                            last[ref] = api_error(e)
                            continue  # sent again next round
                        if status != 404:  # 404: already gone
                            errors.append(f"{ref}: delete refused: {api_error(e)}")
                            failed.append(ref)
                    unsent.remove(ref)
                trouble = None
                try:
                    pending = [r for r in pending if self.get(r) is not None]
                    pods = sorted({p["metadata"]["name"] for s in self._pod_selectors for p in self.pods(s)})
                except (ApiException, LayerbenchError) as e:  # asked again until the timeout
                    trouble = f"cannot check what is left: {api_error(e)}"
                if not (unsent or trouble or pending or pods):
                    break
                if time.monotonic() - t0 >= timeout_s:
                    errors += [f"{r}: delete failed: {last[r]}" for r in unsent]
                    errors += [f"{r} still present after {timeout_s:g} s" for r in pending]
                    errors += [f"pod {p} still present after {timeout_s:g} s" for p in pods]
                    errors += [trouble] if trouble else []
                    failed += unsent + pending
                    break
                left = [str(r) for r in unsent + pending] + [f"pod {p}" for p in pods]
                progress.update(task, description=f"deleting: waiting for {', '.join(left[:4])} to go")
                time.sleep(self.poll_s)
        self._created = [r for r in self._created if r in failed]
        if errors:
            raise LayerbenchError(f"cleanup incomplete in namespace {self.namespace}: " + "; ".join(errors)
                                  + f". What is left: kubectl get all,inferenceservices,rayservices -n {self.namespace}"
                                  f" -l {RUN_LABEL}={self.run_label}")
