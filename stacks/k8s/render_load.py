"""The load of one side on the k8s target: the harness image as a batch/v1 Job (`layerbench run --stack
endpoint`, or `audit`) against the side's in-cluster URL, with the run's profile from a ConfigMap."""

from __future__ import annotations

from typing import Any

import yaml

from harness.profile import LoadProfile
from stacks.k8s.common import Deployed, container_security, labels, template
from stacks.k8s.plan import ClusterSettings

PROFILE_PATH = "/etc/layerbench/profile.yaml"
BARRIER_PORT = 29500  # where load pod 0 waits for the others before each level


def load_command(command: str, url: str, deployed: Deployed, profile_path: str, results_dir: str,
                 repeats: int | None, extra: tuple[str, ...] = ()) -> list[str]:
    """The harness command line that loads one side: what the Job runs, and the docker target's client.
    extra: the command's own arguments (capacity: its SLA and ceiling)."""
    verb = command if command in ("audit", "capacity") else "run"
    args = [verb, "--stack", "endpoint", "--url", url, "--profile", profile_path, "--results-dir", results_dir,
            *extra]
    if repeats and verb in ("run", "capacity"):
        args += ["--repeats", str(repeats)]
    if deployed.protocol == "triton":  # Triton's generate_stream, not OpenAI's API: the client must know
        args += ["--opt", "protocol=triton", "--opt", f"model={deployed.model}"]
    if deployed.metrics:  # the layer's own metric ports, as the local stack declares them
        args += ["--opt", "metric_endpoints=" + ",".join(f"{k}={v}" for k, v in deployed.metrics.items())]
    if deployed.aliases:
        args += ["--opt", "aliases=" + ",".join(deployed.aliases)]
    return args


def profile_text(profile: LoadProfile) -> str:
    return yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False)


def profile_configmap(name: str, cs: ClusterSettings, run_id: str, label: str,
                      profile: LoadProfile) -> dict[str, Any]:
    cm = template("load/configmap.yaml", name=name, namespace=cs.namespace)
    cm["metadata"]["labels"] = labels(run_id, label, "load")
    cm["data"] = {"profile.yaml": profile_text(profile)}
    return cm


def peers_service(name: str, cs: ClusterSettings, run_id: str, label: str) -> dict[str, Any]:
    """The headless Service that gives an Indexed Job's pods stable names (<job>-<i>.<service>), so the other
    load pods reach pod 0's barrier."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{name}-peers", "namespace": cs.namespace, "labels": labels(run_id, label, "load")},
            "spec": {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": name},
                     "ports": [{"name": "barrier", "port": BARRIER_PORT, "targetPort": BARRIER_PORT,
                                "protocol": "TCP"}]}}


def load_job(name: str, configmap: str, cs: ClusterSettings, run_id: str, label: str, command: str,
             deployed: Deployed, repeats: int | None, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    job = template("load/job.yaml", name=name, namespace=cs.namespace, image=cs.load_image, cpu=cs.load_cpu,
                   memory=cs.load_memory, configmap=configmap)
    mine = labels(run_id, label, "load")
    job["metadata"]["labels"] = mine
    pod = job["spec"]["template"]
    pod["metadata"]["labels"] = mine
    container = pod["spec"]["containers"][0]
    container["args"] = load_command(command, deployed.url, deployed, PROFILE_PATH, "/results", repeats, extra)
    if cs.load_parallelism > 1 and command != "capacity":  # M pods, each its part of every level, on pod 0's barrier
        m = cs.load_parallelism
        job["spec"].update(completions=m, parallelism=m, completionMode="Indexed")
        pod["spec"]["subdomain"] = f"{name}-peers"
        container["args"] += ["--shards", str(m), "--barrier",
                              f"{name}-0.{name}-peers.{cs.namespace}.svc.cluster.local:{BARRIER_PORT}"]
        container["ports"] = [{"name": "barrier", "containerPort": BARRIER_PORT, "protocol": "TCP"}]
    container["securityContext"] = container_security(non_root=True)
    results: dict[str, Any] = ({"persistentVolumeClaim": {"claimName": cs.results_pvc}} if cs.results_pvc
                               else {"emptyDir": {}})
    pod["spec"]["volumes"].append({"name": "results", **results})
    return job
