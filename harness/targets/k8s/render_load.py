"""The load of one side on the k8s target: the harness image as a batch/v1 Job (`layerbench run --stack
endpoint`, or `audit`) against the side's in-cluster URL, with the run's profile from a ConfigMap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from harness.profile.schema import LoadProfile
from harness.targets.k8s.common import Deployed, cache_volume, container_security, labels, template
from harness.targets.k8s.plan import ClusterSettings

PROFILE_PATH = "/etc/layerbench/profile.yaml"
BARRIER_PORT = 29500  # where load pod 0 waits for the others before each level
LOAD_HF_HOME = "/hf-cache"  # the HF cache in the load's container (the k8s Job's and the docker client's), read-only


@dataclass(frozen=True)
class LoadCommand:
    """The harness command a side's load runs: the run's command (run, compare, audit, capacity), the repeats asked
    (None: the profile's), and the command's own arguments (capacity: its SLA and ceiling)."""

    command: str = "run"
    repeats: int | None = None
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoadNames:
    """The names and labels of one side's load objects: the Job `<name>-load` (and its peers Service), the profile's
    ConfigMap `<name>-profile`; all labelled as the run's side's load. name: the side's object_name."""

    name: str
    run_id: str
    label: str  # the side: baseline | stack

    @property
    def job(self) -> str:
        return f"{self.name}-load"

    @property
    def configmap(self) -> str:
        return f"{self.name}-profile"

    @property
    def labels(self) -> dict[str, str]:
        return labels(self.run_id, self.label, "load")


def tokenizer_dir(cs: ClusterSettings, hf_home: str = LOAD_HF_HOME) -> str:
    """The served model's snapshot in the HF cache mounted at hf_home: the tokenizer.json the engines read, which
    counts the load's prompt lengths (`--opt tokenizer`; a branch or tag is resolved there from the cache's refs/,
    stacks.endpoint.tokenizer_dir). The k8s and docker targets serve only hub repo ids (cs.model)."""
    return f"{hf_home}/hub/models--{cs.model.replace('/', '--')}/snapshots/{cs.model_revision}"


def uses_pvc(node: Any, claim: str) -> bool:
    """Whether a manifest (or a list of them) mounts the PVC `claim`: in a pod's volumes, or as an
    InferenceService's storageUri pvc://<claim>/<path>."""
    if isinstance(node, list):
        return any(uses_pvc(x, claim) for x in node)
    if not isinstance(node, dict):
        return False
    if (node.get("persistentVolumeClaim") or {}).get("claimName") == claim or \
            str(node.get("storageUri", "")).startswith(f"pvc://{claim}/"):
        return True
    return any(uses_pvc(v, claim) for v in node.values() if isinstance(v, dict | list))


def load_command(what: LoadCommand, deployed: Deployed, profile_path: str, results_dir: str,
                 tokenizer: str | None = None) -> list[str]:
    """The harness command line that loads one side (at deployed.url): what the Job runs, and the docker target's
    client. tokenizer: the directory of the served model's tokenizer.json in the load's container (tokenizer_dir),
    which the load refuses to run without."""
    verb = what.command if what.command in ("audit", "capacity") else "run"
    args = [verb, "--stack", "endpoint", "--url", deployed.url, "--profile", profile_path, "--results-dir",
            results_dir, *what.extra]
    if what.repeats and verb in ("run", "capacity"):
        args += ["--repeats", str(what.repeats)]
    if deployed.protocol == "triton":  # Triton's generate_stream, not OpenAI's API: the client must know
        args += ["--opt", "protocol=triton", "--opt", f"model={deployed.model}"]
    if deployed.spread:  # N bare engines: the load client spreads over them itself, by the local target's rule
        args += ["--opt", "spread=" + ",".join(deployed.spread), "--opt", f"spread_by={deployed.spread_by}"]
    if deployed.metrics:  # the layer's own metric ports, as the local stack declares them
        args += ["--opt", "metric_endpoints=" + ",".join(f"{k}={v}" for k, v in deployed.metrics.items())]
    if deployed.aliases:
        args += ["--opt", "aliases=" + ",".join(deployed.aliases)]
    if tokenizer:
        args += ["--opt", f"tokenizer={tokenizer}"]
    return args


def profile_text(profile: LoadProfile) -> str:
    return yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False)


def profile_configmap(names: LoadNames, cs: ClusterSettings, profile: LoadProfile) -> dict[str, Any]:
    cm = template("load/configmap.yaml", name=names.configmap, namespace=cs.namespace)
    cm["metadata"]["labels"] = names.labels
    cm["data"] = {"profile.yaml": profile_text(profile)}
    return cm


def peers_service(names: LoadNames, cs: ClusterSettings) -> dict[str, Any]:
    """The headless Service that gives an Indexed Job's pods stable names (<job>-<i>.<service>), so the other
    load pods reach pod 0's barrier."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{names.job}-peers", "namespace": cs.namespace, "labels": names.labels},
            "spec": {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": names.job},
                     "ports": [{"name": "barrier", "port": BARRIER_PORT, "targetPort": BARRIER_PORT,
                                "protocol": "TCP"}]}}


def load_job(names: LoadNames, cs: ClusterSettings, what: LoadCommand, deployed: Deployed,
             cache: bool = True) -> dict[str, Any]:
    """The side's load Job. cache: the run's engines read the HF cache PVC, so the load mounts it too and counts
    prompt lengths with the served model's tokenizer.json from it (without: 4 characters a token, and the run
    summary says so; only a KServe raw side fetching hf:// by itself, with no baseline, has no PVC)."""
    name = names.job
    job = template("load/job.yaml", name=name, namespace=cs.namespace, image=cs.load_image, cpu=cs.load_cpu,
                   memory=cs.load_memory, configmap=names.configmap)
    mine = names.labels
    job["metadata"]["labels"] = mine
    pod = job["spec"]["template"]
    pod["metadata"]["labels"] = mine
    container = pod["spec"]["containers"][0]
    container["args"] = load_command(what, deployed, PROFILE_PATH, "/results", tokenizer_dir(cs) if cache else None)
    # M pods, each its part of every level, on pod 0's barrier
    if cs.load_parallelism > 1 and what.command != "capacity":
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
    if cache:  # read-only, so kubelet leaves the cache's group as it is: no fsGroup is applied to a read-only mount
        # (kubernetes pkg/volume/csi/csi_mounter.go, supportsFSGroup)
        pod["spec"]["volumes"].append(cache_volume(cs))
        container["volumeMounts"].append({"name": "hf-cache", "mountPath": LOAD_HF_HOME, "readOnly": True})
    return job


def fit_to_cache(job: dict[str, Any], modes: list[str], nodes: list[str]) -> str:
    """The load Job made to fit the HF cache PVC's access modes, once the side's engine runs on `nodes`; what was
    done, for the side's record ("" when nothing was needed). ReadWriteOnce attaches the volume to one node, where
    any number of pods may use it: the load goes to the engine's node. ReadWriteOncePod lets one pod mount it,
    the engine's: the load goes without it and counts 4 characters a token, as its summary then says
    (https://kubernetes.io/docs/concepts/storage/persistent-volumes/#access-modes)."""
    pod = job["spec"]["template"]["spec"]
    if not any(v.get("name") == "hf-cache" for v in pod.get("volumes") or []) or \
            not modes or {"ReadOnlyMany", "ReadWriteMany"} & set(modes):
        return ""
    container = pod["containers"][0]
    if "ReadWriteOncePod" in modes:
        pod["volumes"] = [v for v in pod["volumes"] if v.get("name") != "hf-cache"]
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m.get("name") != "hf-cache"]
        args = container["args"]
        at = next((i for i in range(1, len(args)) if args[i - 1] == "--opt" and args[i].startswith("tokenizer=")),
                  None)
        if at is not None:
            del args[at - 1:at + 1]
        return "the HF cache PVC is ReadWriteOncePod, the engine's alone: the load counted 4 characters a token"
    if len(nodes) != 1 or nodes[0] == "?":
        return ""
    # the node by its name, as the DaemonSet controller pins a pod (kubernetes pkg/controller/daemon/util/
    # daemonset_util.go, ReplaceDaemonSetPodNodeNameNodeAffinity: matchFields metadata.name In [node])
    pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(nodes)}]}]}}}
    return f"the load ran on node {nodes[0]}, beside the engine: the HF cache PVC is ReadWriteOnce"
