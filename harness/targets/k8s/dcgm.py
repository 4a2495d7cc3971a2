"""GPU telemetry on the k8s target from NVIDIA's dcgm-exporter, where the cluster runs one: each side's load Job
also scrapes the exporter pod on the node of the side's engine (a DaemonSet has one per GPU node, and its Service
would answer from any of them), so the side's scrapes.jsonl holds its GPUs' counters beside the engine's metrics;
the report says which exporter was scraped, or that there was none (layerbench does not install one).

What is looked for, as NVIDIA deploys it:
- the GPU Operator's Service `nvidia-dcgm-exporter` (label app=nvidia-dcgm-exporter, port gpu-metrics 9400) in the
  operator's namespace (NVIDIA/gpu-operator assets/state-dcgm-exporter/0600_service.yaml), scraped at /metrics
  (its ServiceMonitor, assets/state-dcgm-exporter/0500_service_monitor.yaml); its DaemonSet collects
  /etc/dcgm-exporter/dcp-metrics-included.csv (assets/state-dcgm-exporter/0800_daemonset.yaml), whose fields include
  DCGM_FI_DEV_GPU_UTIL and DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (NVIDIA/dcgm-exporter etc/dcp-metrics-included.csv);
- dcgm-exporter's own Helm chart: label app.kubernetes.io/name=dcgm-exporter, port `metrics`, 9400 by default
  (NVIDIA/dcgm-exporter deployment/templates/service.yaml, _helpers.tpl, values.yaml)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from harness.targets.k8s.kubeapi import api_error

LABELS = {"app.kubernetes.io/name": "dcgm-exporter", "app": "nvidia-dcgm-exporter"}
NAME_PART = "dcgm-exporter"
PORT = 9400
PORT_NAMES = ("gpu-metrics", "metrics")
NONE_FOUND = "no dcgm-exporter found: no GPU telemetry on this cluster"


@dataclass(frozen=True)
class Exporter:
    namespace: str
    name: str
    selector: dict[str, str]  # its pods' labels
    port: int | str  # the pods' port: a number or a container port's name
    service_port: int

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def service_url(self) -> str:
        return f"http://{self.name}.{self.namespace}.svc.cluster.local:{self.service_port}/metrics"


def _listed(call: Any, *args: Any, timeout: float, **kwargs: Any) -> list[dict[str, Any]]:
    resp = call(*args, _request_timeout=timeout, _preload_content=False, **kwargs)
    return json.loads(resp.data).get("items") or []


def _exporter(svc: dict[str, Any]) -> tuple[bool, Exporter] | None:
    """(labelled as one, the exporter) where the Service is a dcgm-exporter's: by its labels or its name."""
    meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
    labelled = any((meta.get("labels") or {}).get(k) == v for k, v in LABELS.items())
    if not (labelled or NAME_PART in meta.get("name", "")) or not spec.get("selector"):
        return None
    ports = spec.get("ports") or []
    port = next((p for p in ports if p.get("name") in PORT_NAMES), None) or next(
        (p for p in ports if p.get("port") == PORT), None) or (ports[0] if ports else None)
    if port is None:
        return None
    return labelled, Exporter(meta.get("namespace", ""), meta["name"], dict(spec["selector"]),
                              port.get("targetPort") or port["port"], int(port["port"]))


def find(core: Any, timeout: float = 30.0) -> tuple[Exporter | None, str]:
    """The cluster's dcgm-exporter Service (any namespace; the labels above first, then a name with dcgm-exporter
    in it), or None and the report's sentence why."""
    try:
        services = _listed(core.list_service_for_all_namespaces, timeout=timeout)
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
        return None, f"no dcgm-exporter found (cannot list Services in all namespaces: {api_error(e)}): no GPU " \
                     "telemetry on this cluster"
    found = sorted((x for s in services if (x := _exporter(s)) is not None),
                   key=lambda x: (not x[0], x[1].namespace, x[1].name))
    return (found[0][1], "") if found else (None, NONE_FOUND)


def _pod_port(exporter: Exporter, pod: dict[str, Any]) -> int:
    if isinstance(exporter.port, int):
        return exporter.port
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == exporter.port:
                return int(p["containerPort"])
    return PORT


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def on_nodes(core: Any, exporter: Exporter | None, why: str, nodes: list[str],
             timeout: float = 30.0) -> tuple[dict[str, str], str]:
    """(metric endpoints for the side's load: name -> URL, the report's sentence): the exporter's running pod on
    each of the engine's nodes, by its pod IP. Pods that cannot be listed: the Service's URL, which any node's
    exporter may answer."""
    if exporter is None:
        return {}, why
    try:
        pods = _listed(core.list_namespaced_pod, exporter.namespace, timeout=timeout,
                       label_selector=",".join(f"{k}={v}" for k, v in exporter.selector.items()))
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
        return {"dcgm": exporter.service_url()}, (f"dcgm-exporter scraped: {exporter}, through its Service (its pods "
                                                  f"cannot be listed: {api_error(e)}; a scrape may come from another "
                                                  "GPU node's exporter)")
    endpoints, said, missing = {}, [], []
    for node in nodes:
        pod = next((p for p in pods if (p.get("spec") or {}).get("nodeName") == node
                    and (p.get("status") or {}).get("phase") == "Running" and (p.get("status") or {}).get("podIP")),
                   None)
        if pod is None:
            missing.append(node)
            continue
        url = f"http://{_host(pod['status']['podIP'])}:{_pod_port(exporter, pod)}/metrics"
        endpoints["dcgm" if len(nodes) == 1 else f"dcgm-{node}"] = url
        said.append(f"pod {pod['metadata']['name']} on node {node}, {url}")
    sentence = f"dcgm-exporter scraped: {exporter} ({'; '.join(said)})" if said else ""
    if missing:
        sentence += ("; " if said else "") + (f"dcgm-exporter {exporter} has no running pod on node "
                                              f"{', '.join(missing)}: no GPU telemetry there")
    return endpoints, sentence


def scrape_also(job: dict[str, Any], endpoints: dict[str, str]) -> None:
    """Adds `endpoints` to what a load Job scrapes (its `--opt metric_endpoints=`; without one, the endpoint stack's
    default, api=<url>/metrics, is kept beside them)."""
    if not endpoints:
        return
    args: list[str] = job["spec"]["template"]["spec"]["containers"][0]["args"]
    pairs = ",".join(f"{k}={v}" for k, v in endpoints.items())
    for i, arg in enumerate(args):
        if arg.startswith("metric_endpoints=") and i and args[i - 1] == "--opt":
            args[i] = f"{arg},{pairs}"
            return
    url = args[args.index("--url") + 1].rstrip("/")
    args += ["--opt", f"metric_endpoints=api={url}/metrics,{pairs}"]
