"""The k8s target's cluster side (harness.targets.k8s.cluster, runner, jobresults) through the real `kubernetes`
client over HTTP against tests/k8s_emulator.py: apply, readiness and its failure conditions, engine version,
logs, the load Job's results, deletion that waits until everything is gone, and run_plan end to end (its
preflight failing too). Readiness moves with requests in the emulator, never with sleeps; preflight's own
checks are in test_k8s_preflight.py."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import time
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
import yaml
from rich.console import Console

from harness.errors import LayerbenchError
from harness.targets.k8s import jobresults
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.plan import ClusterSettings, K8sPlan, Side
from harness.targets.k8s.runner import RunOptions, run_plan
from tests.k8s_emulator import Emulator, write_kubeconfig

RUN = "20261201-101010-compare-ray-abc123"
NS = "layerbench"
CS = ClusterSettings(load_image="registry.test/layerbench:1")  # a harness image (the placeholder is refused)


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


@pytest.fixture
def emu():
    with Emulator() as e:
        yield e


def connect(emu: Emulator) -> Cluster:
    return Cluster(NS, RUN, emu.api_client(), poll_s=0.002, request_timeout_s=5)


@pytest.fixture
def cluster(emu: Emulator):
    c = connect(emu)
    yield c
    c.close()


def deployment(name: str, image: str = "vllm/vllm-openai:v0.32.0") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                         {"name": "vllm", "image": image, "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


def service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 8000}]}}


def job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "load", "image": "ghcr.io/layerbench/layerbench:latest"}]}}}}


def isvc(name: str) -> dict[str, Any]:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "vllm"}, "runtime": "rt"}}}}


def marker_log(files: dict[str, str]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    data = buf.getvalue()
    return (f"level 1 done\n{jobresults.MARKER} v1 {hashlib.sha256(data).hexdigest()} "
            f"{base64.b64encode(data).decode()}\n")


def vllm_side(label: str, name: str, load: str) -> Side:
    return Side(label=label, stack="vllm", objects=[deployment(name), service(name)], ready=[("Deployment", name)],
                url=f"http://{name}.{NS}.svc:8000", engine_selector=f"app={name}", load_job=job(load))


def leftovers(emu: Emulator, cluster: Cluster) -> list[str]:
    return emu.labelled(cluster.run_label)


# --- apply, wait, delete ----------------------------------------------------------------------------
def test_apply_wait_ready_and_delete_until_gone(emu: Emulator, cluster: Cluster) -> None:
    side = vllm_side("baseline", "lb-vllm", "lb-load")
    refs = cluster.apply(side.objects)
    assert [str(r) for r in refs] == ["Deployment/lb-vllm", "Service/lb-vllm"]
    stored = emu.objects("Deployment")[0]
    assert stored["metadata"]["labels"] == {"layerbench.io/run": RUN, "app.kubernetes.io/managed-by": "layerbench"}
    assert stored["spec"]["template"]["metadata"]["labels"]["layerbench.io/run"] == RUN
    # the dict went through unchanged: an int quantity the typed client's models would refuse
    assert stored["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "labels" not in side.objects[0]["metadata"]  # the caller's dicts are not modified
    assert cluster.wait_ready(side, 5, quiet()) < 5
    assert emu.objects("Pod", "app=lb-vllm")
    cluster.delete(5, quiet())
    assert leftovers(emu, cluster) == [] and emu.objects("Pod") == []
    deletes = [(p, q) for m, p, q in emu.requests if m == "DELETE"]
    assert [p.rsplit("/", 2)[-2:] for p, _ in deletes] == [["services", "lb-vllm"], ["deployments", "lb-vllm"]]
    assert all(q.get("propagationPolicy") == ["Foreground"] for _, q in deletes)
    assert cluster.created == []


def test_delete_waits_for_slow_deletion(emu: Emulator, cluster: Cluster) -> None:
    emu.delete_after = 25  # ticks: several polls see the object with a deletionTimestamp, still there
    cluster.apply([deployment("lb-slow")])
    cluster.delete(5, quiet())
    assert emu.objects("Deployment") == [] and emu.objects("Pod") == []


def test_custom_resources_go_through_custom_objects_api(emu: Emulator, cluster: Cluster) -> None:
    rt = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "metadata": {"name": "rt"},
          "spec": {"containers": [{"name": "kserve-container", "image": "vllm/vllm-openai:v0.32.0"}]}}
    ray = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "lb-ray"}, "spec": {}}
    cluster.apply([rt, isvc("lb-isvc"), ray])
    posts = [p for m, p, _ in emu.requests if m == "POST"]
    assert posts == [f"/apis/serving.kserve.io/v1alpha1/namespaces/{NS}/servingruntimes",
                     f"/apis/serving.kserve.io/v1beta1/namespaces/{NS}/inferenceservices",
                     f"/apis/ray.io/v1/namespaces/{NS}/rayservices"]
    side = Side(label="stack", stack="kserve", objects=[], ready=[("InferenceService", "lb-isvc"),
                ("RayService", "lb-ray")], url="http://x", engine_selector="component=predictor", load_job=job("j"))
    cluster.wait_ready(side, 5, quiet())
    cluster.delete(5, quiet())
    assert leftovers(emu, cluster) == [] and emu.objects("Pod") == []


def test_existing_object_is_refused_and_not_deleted(emu: Emulator, cluster: Cluster) -> None:
    emu.put("apis/apps/v1", "deployments", NS, deployment("lb-old") | {"metadata": {
        "name": "lb-old", "labels": {"layerbench.io/run": "older-run"}}})
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}  # exists: fine, not ours
    with pytest.raises(LayerbenchError, match=r"Deployment/lb-old already exists in namespace layerbench "
                                              r"\(left by run older-run\): delete it"):
        cluster.apply([ns, service("lb-new"), deployment("lb-old")])
    assert [str(r) for r in cluster.created] == ["Service/lb-new"]
    cluster.delete(5, quiet())
    assert [o["metadata"]["name"] for o in emu.objects("Deployment")] == ["lb-old"]
    assert emu.objects("Service") == [] and NS in [o["metadata"]["name"] for o in emu.objects("Namespace")]


def test_created_namespace_is_deleted_with_its_contents(emu: Emulator) -> None:
    c = Cluster("lb-fresh", RUN, connect(emu).api, poll_s=0.002)
    c.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lb-fresh"}}, service("s")])
    assert emu.objects("Service")[0]["metadata"]["namespace"] == "lb-fresh"
    c.delete(5, quiet())
    assert leftovers(emu, c) == [] and not [o for o in emu.objects("Namespace") if o["metadata"]["name"] == "lb-fresh"]
    c.close()


def test_create_error_names_the_object(emu: Emulator, cluster: Cluster) -> None:
    c = Cluster("nowhere", RUN, cluster.api, poll_s=0.002)
    with pytest.raises(LayerbenchError, match=r'cannot create Service/s: 404 Not Found: namespaces "nowhere"'):
        c.apply([service("s")])


# --- readiness failures -----------------------------------------------------------------------------
def test_timeout_names_the_object_and_its_status(emu: Emulator, cluster: Cluster) -> None:
    emu.behave("lb-vllm", "never")
    side = vllm_side("baseline", "lb-vllm", "lb-load")
    cluster.apply(side.objects)
    t0 = time.monotonic()
    with pytest.raises(LayerbenchError, match=r"^Deployment/lb-vllm not ready after 0.05 s: 0/1 available; "
                                              r"pod lb-vllm-\w+ Pending: container vllm ContainerCreating"):
        cluster.wait_ready(side, 0.05, quiet())
    assert time.monotonic() - t0 < 2
    cluster.delete(5, quiet())
    assert leftovers(emu, cluster) == []


def test_unschedulable_pod_is_named_on_timeout(emu: Emulator, cluster: Cluster) -> None:
    emu.behave("lb-vllm", "unschedulable")
    side = vllm_side("baseline", "lb-vllm", "lb-load")
    cluster.apply(side.objects)
    with pytest.raises(LayerbenchError, match=r"Deployment/lb-vllm not ready after 0.05 s: .*pod lb-vllm-\w+ Pending: "
                                              r"0/3 nodes are available: 3 Insufficient nvidia.com/gpu"):
        cluster.wait_ready(side, 0.05, quiet())


@pytest.mark.parametrize("mode,text", [
    ("image_pull", r'container vllm ImagePullBackOff: Back-off pulling image "vllm/vllm-openai:v9.9.9"'),
    ("crashloop", r"container vllm CrashLoopBackOff: .*\(last exit: Error, code 1, 4 restarts\)"),
])
def test_fatal_pod_states_fail_fast(emu: Emulator, cluster: Cluster, mode: str, text: str) -> None:
    emu.behave("lb-vllm", mode, image="vllm/vllm-openai:v9.9.9")
    side = vllm_side("baseline", "lb-vllm", "lb-load")
    cluster.apply(side.objects)
    t0 = time.monotonic()
    with pytest.raises(LayerbenchError, match=r"^Deployment/lb-vllm cannot become ready: pod lb-vllm-\w+ \w+: " + text):
        cluster.wait_ready(side, 60, quiet())
    assert time.monotonic() - t0 < 2  # not the 60 s timeout


def test_inference_service_ready_false_and_failed_load(emu: Emulator, cluster: Cluster) -> None:
    emu.behave("lb-slow", "never")
    emu.behave("lb-bad", "failed_load")
    cluster.apply([isvc("lb-slow"), isvc("lb-bad")])
    side = Side(label="stack", stack="kserve", objects=[], ready=[("InferenceService", "lb-slow")], url="http://x",
                engine_selector="component=none", load_job=job("j"))
    with pytest.raises(LayerbenchError, match=r"InferenceService/lb-slow not ready after 0.05 s: Ready=False "
                                              r"\(reason PredictorNotReady: predictor not ready\)"):
        cluster.wait_ready(side, 0.05, quiet())
    side.ready = [("InferenceService", "lb-bad")]
    with pytest.raises(LayerbenchError, match=r"InferenceService/lb-bad: model BlockedByFailedLoad "
                                              r"\(ModelLoadFailed: weights not found\)"):
        cluster.wait_ready(side, 60, quiet())


# --- engine version, logs, the load Job --------------------------------------------------------------
def test_engine_version_from_log_then_image_tag(emu: Emulator, cluster: Cluster) -> None:
    side = vllm_side("baseline", "lb-vllm", "lb-load")
    cluster.apply(side.objects)
    cluster.wait_ready(side, 5, quiet())
    v = cluster.engine_version(side)
    assert (v.version, v.source.split(" lb-")[0]) == ("0.32.0", "log of pod")
    pod = emu.objects("Pod", "app=lb-vllm")[0]
    pod["_log"] = "no version line here\n"
    pod["_logs"] = {}
    v = cluster.engine_version(side)
    assert v.version == "0.32.0" and v.source.endswith("(vllm/vllm-openai:v0.32.0)")
    pod["spec"]["containers"][0]["image"] = "rayproject/ray-llm:2.60.0"  # Ray's version, not vLLM's
    with pytest.raises(LayerbenchError, match="cannot tell the vLLM version of pods lb-vllm-"):
        cluster.engine_version(side)


def test_pod_logs_per_container(emu: Emulator, cluster: Cluster) -> None:
    cluster.apply([deployment("lb-vllm")])
    cluster.wait_ready(vllm_side("baseline", "lb-vllm", "j"), 5, quiet())
    pod = emu.objects("Pod", "app=lb-vllm")[0]
    name = pod["metadata"]["name"]
    assert cluster.pod_logs("app=lb-vllm") == {name: pod["_log"]}
    pod["spec"]["containers"].append({"name": "sidecar", "image": "x"})
    assert set(cluster.pod_logs("app=lb-vllm")) == {f"{name}/vllm", f"{name}/sidecar"}


def test_run_job_returns_log_with_results(emu: Emulator, cluster: Cluster, tmp_path: Path) -> None:
    emu.behave("lb-load", log=marker_log({"results/run.json": "{}", "results/levels/c1.json": "[1]"}))
    run = cluster.run_job(job("lb-load"), 5, quiet())
    assert run.name == "lb-load" and run.pod.startswith("lb-load-")
    files = jobresults.unpack(run.log, tmp_path / "baseline")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in files) == [
        "baseline/results/levels/c1.json", "baseline/results/run.json"]
    assert (tmp_path / "baseline/results/levels/c1.json").read_text() == "[1]"
    cluster.delete(5, quiet())
    assert leftovers(emu, cluster) == [] and emu.objects("Pod") == []


def test_failed_job_names_condition_and_log_tail(emu: Emulator, cluster: Cluster) -> None:
    emu.behave("lb-load", "fail", log="connecting\nerror: endpoint refused connection\n")
    with pytest.raises(LayerbenchError, match=r"(?s)Job/lb-load: Failed=True \(reason BackoffLimitExceeded: .*"
                                              r"--- lb-load-\w+ \(last 20 lines\) ---\nconnecting\nerror: endpoint"):
        cluster.run_job(job("lb-load"), 5, quiet())
    cluster.delete(5, quiet())
    assert leftovers(emu, cluster) == []


def test_results_marker_roundtrip_and_damage(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "run1").mkdir(parents=True)
    (src / "run1" / "summary.json").write_text('{"ok": true}')
    line = jobresults.pack(src)
    assert line.startswith("LAYERBENCH_RESULTS v1 ") and "\n" not in line
    out = jobresults.unpack("noise\n" + line + "\n", tmp_path / "dst")
    assert [p.read_text() for p in out] == ['{"ok": true}']
    head, payload = line.rsplit(" ", 1)
    with pytest.raises(LayerbenchError, match="sha256 mismatch"):
        jobresults.unpack(f"{head} {payload[:-8]}AAAAAAAA", tmp_path / "x")
    with pytest.raises(LayerbenchError, match="no LAYERBENCH_RESULTS line"):
        jobresults.unpack("all done\n", tmp_path / "x")
    with pytest.raises(LayerbenchError, match="not a plain relative path"):
        jobresults.unpack(marker_log({"../escape.txt": "x"}), tmp_path / "x")
    assert not (tmp_path / "escape.txt").exists()


# --- cleanup errors ---------------------------------------------------------------------------------
def test_api_errors_that_pass_are_retried(emu: Emulator, cluster: Cluster) -> None:
    side = vllm_side("baseline", "lb-vllm", "lb-load")
    cluster.apply(side.objects)
    emu.flaky["lb-vllm"] = 3  # GETs of the Deployment answer 503 three times
    cluster.wait_ready(side, 5, quiet())
    emu.flaky["lb-vllm"] = 3  # the DELETEs too: sent again, not given up
    cluster.delete(5, quiet())
    assert leftovers(emu, cluster) == [] and emu.flaky["lb-vllm"] == 0


def test_delete_collects_every_error(emu: Emulator, cluster: Cluster) -> None:
    cluster.apply([service("lb-a"), deployment("lb-stuck"), service("lb-b"), service("lb-c")])
    emu.fail_delete.update({"lb-a": 500, "lb-c": 403})
    emu.stuck.add("lb-stuck")
    with pytest.raises(LayerbenchError) as err:
        cluster.delete(0.1, quiet())
    msg = str(err.value)
    assert "Service/lb-a: delete failed: 500 Internal Server Error: etcdserver: request timed out" in msg
    assert "Service/lb-c: delete refused: 403" in msg and f"-l layerbench.io/run={RUN}" in msg
    assert "Deployment/lb-stuck still present after 0.1 s" in msg and "pod lb-stuck-" in msg
    assert sorted(o["metadata"]["name"] for o in emu.objects("Service")) == ["lb-a", "lb-c"]  # lb-b went
    assert sorted(str(r) for r in cluster.created) == ["Deployment/lb-stuck", "Service/lb-a", "Service/lb-c"]
    emu.fail_delete.clear()
    emu.stuck.clear()
    cluster.delete(5, quiet())  # a retry deletes what was left
    assert leftovers(emu, cluster) == []


# --- run_plan ---------------------------------------------------------------------------------------
def two_sides(emu: Emulator) -> K8sPlan:
    for label in ("baseline", "stack"):
        emu.behave(f"lb-{label}-load", log=marker_log({f"{RUN}/{label}.json": f'"{label}"'}))
    stack = Side(label="stack", stack="kserve", objects=[isvc("lb-stack-isvc")],
                 ready=[("InferenceService", "lb-stack-isvc")], url="http://lb-stack-isvc.layerbench.svc",
                 engine_selector="serving.kserve.io/inferenceservice=lb-stack-isvc", load_job=job("lb-stack-load"))
    return K8sPlan(run_id=RUN, namespace=NS, sides=[vllm_side("baseline", "lb-base", "lb-baseline-load"), stack])


def test_run_plan_end_to_end(emu: Emulator, tmp_path: Path) -> None:
    plan = two_sides(emu)
    with Cluster.connect(NS, RUN, write_kubeconfig(tmp_path / "kubeconfig", emu.url), poll_s=0.002) as c:
        assert run_plan(plan, CS, tmp_path, quiet(), RunOptions(cluster=c)) == 0
    assert (tmp_path / f"baseline/{RUN}/baseline.json").read_text() == '"baseline"'
    assert (tmp_path / f"stack/{RUN}/stack.json").read_text() == '"stack"'
    for label in ("baseline", "stack"):
        logs = sorted(p.name for p in (tmp_path / label / "logs").iterdir())
        assert any(n.startswith(f"lb-{label}-load-") for n in logs) and len(logs) == 2
        side = yaml.safe_load((tmp_path / label / "k8s-side.json").read_text())
        assert side["engine_version"] == "0.32.0" and "deleted_s" in side
    assert yaml.safe_load((tmp_path / "k8s-run.json").read_text())["status"] == "complete"
    assert emu.labelled(RUN) == [] and emu.objects("Pod") == []
    # sides one after the other: the stack's first object is created after the baseline's last delete
    calls = [(m, p) for m, p, _ in emu.requests if m in ("POST", "DELETE")]
    first_isvc = calls.index(("POST", f"/apis/serving.kserve.io/v1beta1/namespaces/{NS}/inferenceservices"))
    assert all(m == "DELETE" for m, p in calls[first_isvc - 3:first_isvc])


def test_run_plan_version_mismatch_fails_and_cleans_up(emu: Emulator, tmp_path: Path) -> None:
    plan = two_sides(emu)
    emu.behave("lb-stack-isvc", version="0.31.1")
    with connect(emu) as c, pytest.raises(LayerbenchError, match=r"stack \(kserve\): engine versions differ: "
                                                                 r"baseline runs vLLM 0.32.0 .*stack runs 0.31.1"):
        run_plan(plan, CS, tmp_path, quiet(), RunOptions(cluster=c))
    assert emu.labelled(RUN) == [] and emu.objects("Pod") == []
    assert (tmp_path / "baseline" / RUN / "baseline.json").exists()  # the completed side's results are kept
    assert yaml.safe_load((tmp_path / "k8s-run.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("target,mode", [("lb-base", "image_pull"), ("lb-stack-isvc", "never"),
                                         ("lb-stack-load", "fail")])
def test_run_plan_cleans_up_after_each_failure(emu: Emulator, tmp_path: Path, target: str, mode: str) -> None:
    plan = two_sides(emu)
    emu.behave(target, mode)
    settings = ClusterSettings(ready_timeout_s=0.05)
    with connect(emu) as c, pytest.raises(LayerbenchError):
        run_plan(plan, settings, tmp_path, quiet(), RunOptions(cluster=c))
    assert emu.labelled(RUN) == [] and emu.objects("Pod") == []


def test_run_plan_keeps_the_results_of_a_failed_load(emu: Emulator, tmp_path: Path) -> None:
    plan = two_sides(emu)
    emu.behave("lb-baseline-load", "fail", log="error: level 4 failed\n" + marker_log({"partial.json": "[]"}))
    with connect(emu) as c, pytest.raises(LayerbenchError, match=r"(?s)baseline \(vllm\): Job/lb-baseline-load: "
                                                                 r"Failed=True.*error: level 4 failed"):
        run_plan(plan, CS, tmp_path, quiet(), RunOptions(cluster=c))
    assert (tmp_path / "baseline" / "partial.json").read_text() == "[]"
    assert emu.labelled(RUN) == []


def test_run_plan_reports_a_failed_cleanup_with_the_failure(emu: Emulator, tmp_path: Path) -> None:
    plan = two_sides(emu)
    emu.behave("lb-base", "image_pull")
    emu.stuck.add("lb-base")
    with connect(emu) as c, pytest.raises(LayerbenchError, match=r"(?s)baseline \(vllm\): Deployment/lb-base cannot "
                                          r"become ready: .*ImagePullBackOff.*\nand then cleanup incomplete.*"
                                          r"Deployment/lb-base still present after 0.05 s"):
        run_plan(plan, CS.model_copy(update={"delete_timeout_s": 0.05}), tmp_path, quiet(), RunOptions(cluster=c))


def test_run_plan_cleans_up_after_an_interrupt(emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with connect(emu) as c, pytest.raises(KeyboardInterrupt):
        monkeypatch.setattr(c, "run_job", Mock(side_effect=KeyboardInterrupt))
        run_plan(two_sides(emu), CS, tmp_path, quiet(), RunOptions(cluster=c))
    assert emu.labelled(RUN) == [] and emu.objects("Pod") == []
    assert yaml.safe_load((tmp_path / "k8s-run.json").read_text())["status"] == "failed"


def test_run_plan_preflight_failure_deploys_nothing(tmp_path: Path) -> None:
    with Emulator(gpu_nodes={}) as emu, connect(emu) as c:
        with pytest.raises(LayerbenchError, match=r"no node has nvidia.com/gpu allocatable >= 1 \(nodes: none\)"):
            run_plan(two_sides(emu), CS, tmp_path, quiet(), RunOptions(cluster=c))
        assert not [r for r in emu.requests if r[0] == "POST"]
