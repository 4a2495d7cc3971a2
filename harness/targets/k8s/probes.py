"""Preflight's probes: short Jobs that answer, before any engine is started or any GPU taken, what only the
cluster can answer. One per engine image prints the vLLM it carries (`python3 -c "import vllm; ..."`), so a set
whose versions differ is refused up front; one pulls the load image and checks it is layerbench's harness; one
mounts the HF-cache PVC and looks for the model's snapshot. A probe that cannot pull its image names it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from harness.errors import LayerbenchError
from harness.targets.k8s.common import container_security, labels, resources
from harness.targets.k8s.images import LOAD_IMAGE_PLACEHOLDER, VERSION_PROBE, probe_version, release
from harness.targets.k8s.plan import ClusterSettings, K8sPlan

HARNESS_MARKER = "LAYERBENCH_HARNESS"
MODEL_MARKER = "LAYERBENCH_MODEL"
PROBE_DEADLINE_S = 1800  # an engine image is 10-20 GB: its first pull on a node takes minutes
HARNESS_PROBE = ["python3", "-c", f"import harness; print('{HARNESS_MARKER}', harness.__version__)"]
CACHE_MOUNT = "/hf-cache"


@dataclass
class Probe:
    what: str  # "version" | "harness" | "model"
    image: str
    job: dict[str, Any]


def model_probe_command(repo: str, revision: str) -> list[str]:
    """found: the snapshot with its config.json and the tokenizer.json the load counts prompt lengths with;
    no-tokenizer: the snapshot without the latter; missing: no snapshot."""
    code = (f"from pathlib import Path; from harness.host.doctor import cached_snapshot; "
            f"s = cached_snapshot(Path('{CACHE_MOUNT}/hub'), '{repo}', '{revision}'); "
            f"print('{MODEL_MARKER}', ('found' if (s / 'tokenizer.json').is_file() else 'no-tokenizer') if s "
            f"else 'missing', '{repo}@{revision}')")
    return ["python3", "-c", code]


def probe_job(name: str, cs: ClusterSettings, run_id: str, image: str, command: list[str],
              cache: bool = False) -> dict[str, Any]:
    """A Job of one pod that runs `command` in `image` once: no GPU, no service account token, no retries."""
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    if cache:
        volumes.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": cs.hf_cache_pvc, "readOnly": True}})
        mounts.append({"name": "hf-cache", "mountPath": CACHE_MOUNT, "readOnly": True})
    mine = labels(run_id, "preflight", "probe")
    container = {"name": "probe", "image": image, "command": command, "resources": resources("1", "4Gi"),
                 "env": [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HUB_OFFLINE", "value": "1"},
                         {"name": "VLLM_NO_USAGE_STATS", "value": "1"}],
                 "securityContext": container_security(), "volumeMounts": mounts}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": cs.namespace, "labels": mine},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": PROBE_DEADLINE_S, "template": {
                "metadata": {"labels": mine},
                "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
                         "containers": [container], "volumes": volumes}}}}


def _name(run_id: str, what: str, image: str) -> str:
    suffix = run_id.rsplit("-", 1)[-1].lower()[:8]
    return f"lb-probe-{what}-{hashlib.sha256(image.encode()).hexdigest()[:8]}-{suffix}"


def probes(plan: K8sPlan, cs: ClusterSettings, uses_cache: bool) -> list[Probe]:
    """The plan's probes: each distinct engine image, the load image, the model in the cache PVC."""
    if cs.load_image == LOAD_IMAGE_PLACEHOLDER:
        raise LayerbenchError(f"load_image is the placeholder {LOAD_IMAGE_PLACEHOLDER}: build the harness image from "
                              "this checkout and push it where the cluster pulls from (docker build -t "
                              "REGISTRY/layerbench:TAG . && docker push REGISTRY/layerbench:TAG), then set load_image "
                              "in the cluster config (CLUSTER_CONFIG=FILE)")
    images = sorted({i for side in plan.sides for i in side.engine_images})
    out = [Probe("version", i, probe_job(_name(plan.run_id, "vllm", i), cs, plan.run_id, i, VERSION_PROBE))
           for i in images]
    out.append(Probe("harness", cs.load_image, probe_job(_name(plan.run_id, "load", cs.load_image), cs, plan.run_id,
                                                         cs.load_image, HARNESS_PROBE)))
    if uses_cache:
        out.append(Probe("model", cs.load_image, probe_job(
            _name(plan.run_id, "model", cs.model + cs.model_revision), cs, plan.run_id, cs.load_image,
            model_probe_command(cs.model, cs.model_revision), cache=True)))
    return out


def judge(probe: Probe, log: str | None, failure: str | None, cs: ClusterSettings) -> str:
    """What one probe found (the vLLM version, for a version probe); LayerbenchError saying what to change."""
    if failure is not None:
        pulled = "pull" in failure.lower() or "image" in failure.lower()
        raise LayerbenchError(f"image {probe.image} " + ("cannot be pulled (an unknown tag, or a registry the cluster "
                                                           "cannot reach): " if pulled else "did not run its probe: ")
                              + failure.splitlines()[0][:300])
    log = log or ""
    if probe.what == "version":
        version = probe_version(log)
        if version is None:
            raise LayerbenchError(f"image {probe.image} has no vLLM (python3 -c 'import vllm' failed): "
                                  f"{(log.strip().splitlines() or ['no output'])[-1][:200]}")
        return version
    if probe.what == "harness":
        if HARNESS_MARKER not in log:
            raise LayerbenchError(f"load_image {probe.image} is not layerbench's harness image (it has no `harness` "
                                  "package): build it from this checkout's Dockerfile")
        return "ok"
    if f"{MODEL_MARKER} no-tokenizer" in log:
        raise LayerbenchError(f"the HF cache PVC {cs.hf_cache_pvc} has {cs.model} at revision {cs.model_revision} "
                              "but no tokenizer.json in its snapshot, which the load counts prompt lengths with: "
                              f"download it onto the PVC, with HF_HOME on it: hf download {cs.model} tokenizer.json "
                              f"--revision {cs.model_revision}")
    if f"{MODEL_MARKER} found" not in log:
        raise LayerbenchError(f"the HF cache PVC {cs.hf_cache_pvc} has no {cs.model} at revision {cs.model_revision} "
                              f"(no hub/models--{cs.model.replace('/', '--')}/snapshots/... with a config.json): "
                              f"download it onto the PVC first, with HF_HOME on it: hf download {cs.model} --revision "
                              f"{cs.model_revision} (huggingface_hub >= 1.0 has only the `hf` command)")
    return "found"


def run_probes(cluster: Any, found: list[Probe], cs: ClusterSettings, console: Console | None) -> dict[str, str]:
    """Starts every probe, then waits for each; {image: vLLM version} of the version probes. Each probe's Job is
    the cluster's to delete with the rest of the run (Cluster.delete)."""
    from harness.targets.k8s.kubeapi import JobFailed

    started = [(p, cluster.start_job(p.job)) for p in found]
    versions: dict[str, str] = {}
    for p, ref in started:
        log, failure = None, None
        try:
            log = cluster.finish_job(ref, PROBE_DEADLINE_S + 120.0, console).log
        except JobFailed as e:
            logs = "\n".join(e.logs.values())
            if "pull" not in str(e).lower() and logs.strip():
                log = logs  # it ran and said why: "No module named 'vllm'"
            else:
                failure = str(e)
        result = judge(p, log, failure, cs)
        if p.what == "version":
            versions[p.image] = result
    return versions


def version_problem(plan: K8sPlan, versions: dict[str, str]) -> str | None:
    """A table of image -> vLLM when the plan's engines would not run the same version, else None."""
    mine = {i: release(versions[i]) for side in plan.sides for i in side.engine_images if i in versions}
    if len(set(mine.values())) <= 1:  # NVIDIA's 0.11.1+9114fd76.nv25.12 is release 0.11.1
        return None
    rows = []
    for side in plan.sides:
        for image in side.engine_images:
            rows.append(f"  {side.label} ({side.stack}): {image} -> vLLM {versions.get(image, '?')}")
    return "the images run different vLLM versions, so the layer's cost would be mixed with the engine's:\n" + \
        "\n".join(dict.fromkeys(rows))
