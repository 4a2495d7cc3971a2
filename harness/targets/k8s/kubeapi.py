"""Client plumbing the cluster side shares: which kubeconfig to load and an ApiClient from it, how an object
is named (Ref) and which API it goes through, the labels every object of a run carries, and one-line API
error texts. No polling and no run state here (harness.targets.k8s.cluster has those)."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from harness.errors import LayerbenchError
from harness.targets.k8s.plan import label_value

MANAGED_BY, MANAGER = "app.kubernetes.io/managed-by", "layerbench"
RUN_LABEL = "layerbench.io/run"
CUSTOM_PLURALS = {("serving.kserve.io", "InferenceService"): "inferenceservices",
                  ("serving.kserve.io", "ServingRuntime"): "servingruntimes",
                  ("ray.io", "RayService"): "rayservices"}
# for (kind, name) in Side.ready that the plan does not create itself (KServe's predictor Deployment)
DEFAULT_API_VERSION = {"Deployment": "apps/v1", "Job": "batch/v1", "Service": "v1", "ConfigMap": "v1",
                       "InferenceService": "serving.kserve.io/v1beta1", "ServingRuntime": "serving.kserve.io/v1alpha1",
                       "RayService": "ray.io/v1"}


def run_label_value(run_id: str) -> str:
    """The run id as the renderers label with it (harness.targets.k8s.plan.label_value), refused when nothing is
    left."""
    value = label_value(run_id)
    if not value:
        raise LayerbenchError(f"run id {run_id!r} has nothing usable as a label value")
    return value


def with_labels(obj: dict[str, Any], run_label: str) -> dict[str, Any]:
    """A copy carrying the run's labels, on the object and on the pod template of kinds that have one (so
    their pods can be found, and seen gone, by the run label). Labels already there are kept; a run label
    of another run is a bug of the caller's."""
    body = copy.deepcopy(obj)
    metas = [body.setdefault("metadata", {})]
    if body.get("kind") in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
        metas.append(body.setdefault("spec", {}).setdefault("template", {}).setdefault("metadata", {}))
    for meta in metas:
        labels = meta.setdefault("labels", {})
        if labels.setdefault(RUN_LABEL, run_label) != run_label:
            raise LayerbenchError(f"{body.get('kind')}/{body['metadata'].get('name')} is labelled for run "
                                  f"{labels[RUN_LABEL]}, not {run_label}")
        labels.setdefault(MANAGED_BY, MANAGER)
    return body


@dataclass(frozen=True)
class Ref:
    kind: str
    api_version: str
    name: str
    namespace: str | None  # None: cluster-scoped (Namespace)

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def custom(self) -> tuple[str, str, str] | None:
        """(group, version, plural) when this kind goes through CustomObjectsApi."""
        group, _, version = self.api_version.rpartition("/")
        plural = CUSTOM_PLURALS.get((group, self.kind))
        return (group, version, plural) if plural else None


def api_error(e: BaseException) -> str:
    """One line from an API error: the Status message the server sent, else the HTTP reason."""
    if isinstance(e, ApiException):
        message = None
        try:
            message = json.loads(e.body or "").get("message")
        except (ValueError, AttributeError):
            pass
        return f"{e.status} {e.reason}" + (f": {message}" if message else "")
    if isinstance(e, urllib3.exceptions.MaxRetryError):
        text = str(e.reason)  # "HTTPConnection(host=..., port=...): Failed to establish...": the host is said
        return text.split("): ", 1)[1] if text.startswith(("HTTPConnection(", "HTTPSConnection(")) else text
    return str(e) or type(e).__name__


class Unreachable(LayerbenchError):
    """The API server did not answer (connection refused, reset, timed out): maybe for a moment only."""


class JobFailed(LayerbenchError):
    """The load Job failed; `logs` (pod -> text) may still carry the results marker of what it measured."""

    def __init__(self, message: str, logs: dict[str, str]):
        super().__init__(message)
        self.logs = logs


def unreachable(host: str, e: BaseException) -> Unreachable:
    return Unreachable(f"cannot reach the cluster at {host}: {api_error(e)}; check KUBECONFIG")


def resolve_kubeconfig(path: str | Path | None) -> str | None:
    """The kubeconfig to load: `path`, else $KUBECONFIG (a list, as kubectl reads it), else ~/.kube/config.
    None inside a pod with no kubeconfig (its service account is used)."""
    if path is not None:
        if not Path(path).expanduser().is_file():
            raise LayerbenchError(f"no kubeconfig at {path}; point --kubeconfig or KUBECONFIG at your cluster's")
        return str(Path(path).expanduser())
    env = os.environ.get("KUBECONFIG", "")
    candidates = [p for p in env.split(os.pathsep) if p] if env else [str(Path("~/.kube/config").expanduser())]
    if any(Path(p).expanduser().is_file() for p in candidates):
        return os.pathsep.join(candidates)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    where = f"KUBECONFIG={env}" if env else "KUBECONFIG is unset and ~/.kube/config"
    raise LayerbenchError(f"no kubeconfig: {where} does not exist; set KUBECONFIG to your cluster's kubeconfig")


def api_client(kubeconfig: str | Path | None = None, context: str | None = None) -> k8s.ApiClient:
    """An ApiClient for the kubeconfig (see resolve_kubeconfig); a broken kubeconfig is one clear message."""
    path = resolve_kubeconfig(kubeconfig)
    cfg = k8s.Configuration()
    try:
        if path is None:
            k8s_config.load_incluster_config(client_configuration=cfg)
        else:
            k8s_config.load_kube_config(config_file=path, context=context, client_configuration=cfg,
                                        persist_config=False)
    except (ConfigException, OSError, ValueError, TypeError) as e:
        raise LayerbenchError(f"cannot use kubeconfig {path or '(in-cluster)'}: {e}") from None
    return k8s.ApiClient(cfg)


def current_context(kubeconfig: str | Path | None = None) -> str | None:
    """The name of the kubeconfig's current context (None in a pod, or where it cannot be read)."""
    try:
        path = resolve_kubeconfig(kubeconfig)
        if path is None:
            return None
        _, active = k8s_config.list_kube_config_contexts(config_file=path.split(os.pathsep)[0])
        return (active or {}).get("name")
    except (LayerbenchError, ConfigException, OSError, ValueError, TypeError, KeyError):
        return None
