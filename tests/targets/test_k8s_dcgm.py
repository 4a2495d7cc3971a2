"""GPU telemetry on the k8s target (harness.targets.k8s.dcgm, through run_plan against tests/k8s_emulator.py): where the
cluster runs NVIDIA's dcgm-exporter, each side's load Job also scrapes the exporter pod on the engine's node and
the side's record (and so the report) names it; where it runs none, the record says there is no GPU telemetry.
The same runs check that each load Job mounts the HF cache read-only and counts with the served model's snapshot.

The exporter here is the GPU Operator's, as its manifests deploy it: Service `nvidia-dcgm-exporter` with label and
selector app=nvidia-dcgm-exporter and port `gpu-metrics` 9400 (NVIDIA/gpu-operator
assets/state-dcgm-exporter/0600_service.yaml), a DaemonSet pod with container port `metrics` 9400
(assets/state-dcgm-exporter/0800_daemonset.yaml), in the operator's namespace (gpu-operator, as its Helm install
names it)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from harness.profile.loading import load_profile
from harness.targets.k8s import dcgm, jobresults
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.runner import RunOptions, run_plan
from stacks.base import DeploySettings, get_stack
from tests.k8s_emulator import Emulator

RUN = "20261201-101010-compare-vllm-abc123"
NS = "layerbench"
COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"
CS = ClusterSettings(load_image="registry.test/layerbench:1", model="Qwen/Qwen2.5-0.5B-Instruct",
                     model_revision=COMMIT)
SNAPSHOT = f"/hf-cache/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/{COMMIT}"


def gpu_operator_exporter(emu: Emulator, node: str = "gpu-1", ip: str = "10.0.3.7") -> None:
    """The GPU Operator's dcgm-exporter: its Service and its DaemonSet's pod on `node`."""
    app = {"app": "nvidia-dcgm-exporter"}
    emu.put("api/v1", "namespaces", "", {"metadata": {"name": "gpu-operator"}})
    emu.put("api/v1", "services", "gpu-operator", {
        "metadata": {"name": "nvidia-dcgm-exporter", "labels": dict(app),
                     "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9400"}},
        "spec": {"selector": dict(app), "ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400,
                                                   "protocol": "TCP"}]}})
    emu.put("api/v1", "pods", "gpu-operator", {
        "metadata": {"name": "nvidia-dcgm-exporter-x7k2p", "labels": dict(app)},
        "spec": {"nodeName": node, "containers": [{"name": "nvidia-dcgm-exporter",
                                                   "ports": [{"name": "metrics", "containerPort": 9400}]}]},
        "status": {"phase": "Running", "podIP": ip}})


def compare(emu: Emulator, tmp_path: Path, modes: list[str] | None = None) -> tuple[dict[str, dict], dict[str, Any]]:
    """A vllm compare run on the emulator, each load Job answering with a results folder; (each side's
    k8s-side.json, each load Job as the cluster got it). modes: the HF cache PVC's access modes (status)."""
    emu.put("api/v1", "persistentvolumeclaims", NS, {"metadata": {"name": "hf-cache"},
                                                     **({"status": {"accessModes": modes}} if modes else {})})
    profile = load_profile("quick")
    stack = get_stack("vllm")(DeploySettings(engine=profile.engine, target="k8s"))
    plan = render_plan(stack, profile, CS, RUN, LoadCommand("compare", 1))
    (tmp_path / "results" / RUN).mkdir(parents=True)
    (tmp_path / "results" / RUN / "summary.json").write_text("{}")
    for side in plan.sides:
        emu.behave(side.load_job["metadata"]["name"], log=jobresults.pack(tmp_path / "results") + "\n")
    with Cluster(NS, RUN, emu.api_client(), poll_s=0.002, request_timeout_s=5) as c:
        assert run_plan(plan, CS, tmp_path / "out", Console(file=io.StringIO(), width=200), RunOptions(cluster=c)) == 0
    sides = {label: json.loads((tmp_path / "out" / label / "k8s-side.json").read_text())
             for label in ("baseline", "stack")}
    jobs = {o["metadata"]["labels"]["layerbench.io/side"]: o for o in emu.created
            if o["kind"] == "Job" and o["metadata"]["name"].endswith("-load")}
    return sides, jobs


def args_of(job: dict[str, Any]) -> list[str]:
    return job["spec"]["template"]["spec"]["containers"][0]["args"]


def opt(args: list[str], key: str) -> str | None:
    found = [a.split("=", 1)[1] for i, a in enumerate(args) if i and args[i - 1] == "--opt"
             and a.startswith(f"{key}=")]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_the_engines_node_exporter_is_scraped_and_named(tmp_path: Path) -> None:
    with Emulator() as emu:
        gpu_operator_exporter(emu)
        emu.put("api/v1", "pods", "gpu-operator", {  # another GPU node's exporter: not the engine's
            "metadata": {"name": "nvidia-dcgm-exporter-q9w4z", "labels": {"app": "nvidia-dcgm-exporter"}},
            "spec": {"nodeName": "gpu-2", "containers": []}, "status": {"phase": "Running", "podIP": "10.0.4.9"}})
        sides, jobs = compare(emu, tmp_path)
    for label in ("baseline", "stack"):
        endpoints = dict(pair.split("=", 1) for pair in opt(args_of(jobs[label]), "metric_endpoints").split(","))
        assert endpoints["dcgm"] == "http://10.0.3.7:9400/metrics"  # the pod on gpu-1, where the engine ran
        assert endpoints["api"].endswith(":8000/metrics")  # the engine's own metrics stay
        said = sides[label]["gpu_telemetry"]
        assert said.startswith("dcgm-exporter scraped: gpu-operator/nvidia-dcgm-exporter (pod "
                               "nvidia-dcgm-exporter-x7k2p on node gpu-1")


def test_a_cluster_without_an_exporter_says_it_has_no_gpu_telemetry(tmp_path: Path) -> None:
    with Emulator() as emu:
        sides, jobs = compare(emu, tmp_path)
    for label in ("baseline", "stack"):
        assert "dcgm" not in (opt(args_of(jobs[label]), "metric_endpoints") or "")
        assert sides[label]["gpu_telemetry"] == "no dcgm-exporter found: no GPU telemetry on this cluster"


def test_an_exporter_without_a_pod_on_the_engines_node_is_not_scraped(tmp_path: Path) -> None:
    with Emulator() as emu:
        gpu_operator_exporter(emu, node="gpu-2")
        sides, jobs = compare(emu, tmp_path)
    assert "dcgm" not in opt(args_of(jobs["stack"]), "metric_endpoints")
    assert sides["stack"]["gpu_telemetry"] == ("dcgm-exporter gpu-operator/nvidia-dcgm-exporter has no running pod "
                                               "on node gpu-1: no GPU telemetry there")


def test_each_load_job_mounts_the_cache_read_only_and_counts_with_the_served_models_tokenizer(tmp_path: Path) -> None:
    with Emulator() as emu:
        _, jobs = compare(emu, tmp_path)
    for job in jobs.values():
        pod = job["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "hf-cache")
        assert volume["persistentVolumeClaim"] == {"claimName": "hf-cache", "readOnly": True}
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "hf-cache")
        assert mount == {"name": "hf-cache", "mountPath": "/hf-cache", "readOnly": True}
        assert opt(args_of(job), "tokenizer") == SNAPSHOT  # where the engines read the same model


def test_a_read_write_once_cache_puts_the_load_beside_the_engine(tmp_path: Path) -> None:
    """A ReadWriteOnce PVC attaches to one node, the engine's: the load is placed there to mount it too."""
    with Emulator() as emu:
        sides, jobs = compare(emu, tmp_path, ["ReadWriteOnce"])
    for label, job in jobs.items():
        affinity = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
        assert opt(args_of(job), "tokenizer") == SNAPSHOT
        assert sides[label]["load_placement"].startswith("the load ran on node gpu-1, beside the engine")


def test_a_read_write_once_pod_cache_is_the_engines_alone(tmp_path: Path) -> None:
    with Emulator() as emu:
        sides, jobs = compare(emu, tmp_path, ["ReadWriteOncePod"])
    for label, job in jobs.items():
        pod = job["spec"]["template"]["spec"]
        assert all(v["name"] != "hf-cache" for v in pod["volumes"]) and "affinity" not in pod
        assert all(m["name"] != "hf-cache" for m in pod["containers"][0]["volumeMounts"])
        assert opt(args_of(job), "tokenizer") is None and "--opt" != args_of(job)[-1]
        assert "4 characters a token" in sides[label]["load_placement"]


def test_a_shared_cache_leaves_the_load_where_the_scheduler_puts_it(tmp_path: Path) -> None:
    with Emulator() as emu:
        sides, jobs = compare(emu, tmp_path, ["ReadOnlyMany"])
    assert all("affinity" not in j["spec"]["template"]["spec"] for j in jobs.values())
    assert all("load_placement" not in side for side in sides.values())


# --- the pieces ---------------------------------------------------------------------------------------------
def test_the_helm_charts_exporter_is_found_by_its_label_and_its_named_port() -> None:
    """dcgm-exporter's own chart: app.kubernetes.io/name=dcgm-exporter, port `metrics` (NVIDIA/dcgm-exporter
    deployment/templates/service.yaml and _helpers.tpl), in whatever namespace it was installed."""
    with Emulator() as emu:
        emu.put("api/v1", "namespaces", "", {"metadata": {"name": "monitoring"}})
        emu.put("api/v1", "services", "monitoring", {  # not an exporter: a name alone without dcgm-exporter
            "metadata": {"name": "prometheus", "labels": {"app": "prometheus"}},
            "spec": {"selector": {"app": "prometheus"}, "ports": [{"port": 9090}]}})
        labels = {"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "gpu-metrics"}
        emu.put("api/v1", "services", "monitoring", {
            "metadata": {"name": "gpu-metrics-dcgm-exporter", "labels": {**labels, "helm.sh/chart": "dcgm-exporter"}},
            "spec": {"selector": labels, "ports": [{"name": "metrics", "port": 9400, "targetPort": 9400}]}})
        from kubernetes import client as k8s

        with emu.api_client() as api:
            found, why = dcgm.find(k8s.CoreV1Api(api))
    assert why == "" and found is not None
    assert (str(found), found.selector, found.port) == ("monitoring/gpu-metrics-dcgm-exporter", labels, 9400)
    assert found.service_url() == "http://gpu-metrics-dcgm-exporter.monitoring.svc.cluster.local:9400/metrics"


def test_scrape_also_keeps_what_the_job_scraped() -> None:
    job = {"spec": {"template": {"spec": {"containers": [{"args": [
        "run", "--stack", "endpoint", "--url", "http://svc:8000/", "--opt",
        "metric_endpoints=api=http://svc:8000/m"]}]}}}}
    dcgm.scrape_also(job, {"dcgm": "http://10.0.0.1:9400/metrics"})
    assert args_of(job)[-1] == "metric_endpoints=api=http://svc:8000/m,dcgm=http://10.0.0.1:9400/metrics"
    bare = {"spec": {"template": {"spec": {"containers": [{"args": ["run", "--url", "http://svc:8000/"]}]}}}}
    dcgm.scrape_also(bare, {"dcgm": "http://10.0.0.1:9400/metrics"})  # the endpoint stack's default kept beside
    assert args_of(bare)[-2:] == ["--opt",
                                  "metric_endpoints=api=http://svc:8000/metrics,dcgm=http://10.0.0.1:9400/metrics"]
    dcgm.scrape_also(bare, {})
    assert len(args_of(bare)) == 5


@pytest.mark.parametrize(("ip", "url"), [("10.0.3.7", "http://10.0.3.7:9400/metrics"),
                                         ("fd00::7", "http://[fd00::7]:9400/metrics")])
def test_a_pod_ip_becomes_a_url(ip: str, url: str) -> None:
    exporter = dcgm.Exporter("gpu-operator", "nvidia-dcgm-exporter", {"app": "x"}, "metrics", 9400)
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [
        {"ports": [{"name": "metrics", "containerPort": 9400}]}]}, "status": {"phase": "Running", "podIP": ip}}

    class Core:
        def list_namespaced_pod(self, *args: Any, **kwargs: Any) -> Any:
            return type("R", (), {"data": json.dumps({"items": [pod]}).encode()})()

    endpoints, said = dcgm.on_nodes(Core(), exporter, "", ["n1"])
    assert endpoints == {"dcgm": url} and said.endswith(f"(pod p on node n1, {url})")


# --- the report -----------------------------------------------------------------------------------------------
def cluster_compare(cluster: dict[str, Any]):
    from harness.schemas import CompareSummary
    from harness.targets.remote_compare import cluster_model

    return CompareSummary(run_id="t", stack="vllm", baseline_stack="vllm", in_request_path=True, profile="p",
                          repeats=1, versions={}, version_match=True, applied={}, settings_match=True,
                          settings_mismatches=[], options={}, target="k8s", model=cluster_model(CS.model, COMMIT),
                          cluster={"namespace": NS, **cluster})


def test_the_report_names_the_exporter_scraped_or_says_there_was_none() -> None:
    from harness.reporting.report import decision

    said = "dcgm-exporter scraped: gpu-operator/nvidia-dcgm-exporter (pod p on node gpu-1, http://10.0.3.7:9400/metrics)"
    both = cluster_compare({label: {"images": ["i"], "gpu_telemetry": said} for label in ("baseline", "stack")})
    assert f"GPU telemetry: {said}" in decision(both)
    none = cluster_compare({"baseline": {"gpu_telemetry": dcgm.NONE_FOUND}, "stack": {"gpu_telemetry": said}})
    assert f"GPU telemetry: baseline: {dcgm.NONE_FOUND}; stack: {said}" in decision(none)
    older = cluster_compare({"baseline": {"images": ["i"]}})  # a run recorded before GPU telemetry was looked for
    assert not any(line.startswith("GPU telemetry") for line in decision(older))
