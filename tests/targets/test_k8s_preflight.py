"""Preflight of the k8s target (harness.targets.k8s.preflight) through the real `kubernetes` client over HTTP against
tests/k8s_emulator.py: each failure's exact, actionable message, and one read-only check of a real cluster
(marked `cluster`, skipped without a kubeconfig)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from harness.errors import LayerbenchError
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.preflight import deployment_mode, preflight
from tests.k8s_emulator import Emulator, write_kubeconfig

RUN = "preflight-test"
NS = "layerbench"


def isvc(name: str, annotated: bool = True) -> dict[str, Any]:
    annotations = {"serving.kserve.io/deploymentMode": "RawDeployment"} if annotated else {}
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "annotations": annotations}, "spec": {}}


def kubeconfig(tmp_path: Path, server: str) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", server)


@pytest.fixture
def emu():
    with Emulator() as e:
        yield e


def connect(emu: Emulator) -> Cluster:
    return Cluster(NS, RUN, emu.api_client(), poll_s=0.002, request_timeout_s=5)


# --- preflight --------------------------------------------------------------------------------------
def test_preflight_no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(LayerbenchError, match=r"no kubeconfig: KUBECONFIG=.*missing does not exist; set KUBECONFIG"):
        Cluster.connect(NS, RUN)
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(LayerbenchError, match=r"no kubeconfig: KUBECONFIG is unset and ~/.kube/config does not exist"):
        Cluster.connect(NS, RUN)


def test_preflight_unreachable_cluster(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with Cluster.connect(NS, RUN, kubeconfig(tmp_path, f"http://127.0.0.1:{port}")) as c:
            with pytest.raises(LayerbenchError, match=rf"^cannot reach the cluster at http://127.0.0.1:{port}: "
                                                      r".*; check KUBECONFIG$"):
                preflight(c, ClusterSettings(), ["vllm"])


def test_preflight_passes_with_kubeconfig(emu: Emulator, tmp_path: Path) -> None:
    with Cluster.connect(NS, RUN, kubeconfig(tmp_path, emu.url)) as c:
        assert preflight(c, ClusterSettings(), ["kserve", "ray"], [isvc("i")]) == []


@pytest.mark.parametrize("setup,stacks,objects,error", [
    (dict(kserve_mode=None), ["kserve"], [], r"namespace kserve missing: KServe is not installed"),
    (dict(crds=("servingruntimes.serving.kserve.io", "rayservices.ray.io")), ["kserve"], [],
     r"CRD inferenceservices.serving.kserve.io missing: install KServe"),
    (dict(crds=("inferenceservices.serving.kserve.io", "servingruntimes.serving.kserve.io")), ["ray"], [],
     r"CRD rayservices.ray.io missing: install the KubeRay operator"),
    (dict(), ["ray"], [{"apiVersion": "ray.io/v2", "kind": "RayService", "metadata": {"name": "r"}}],
     r"CRD rayservices.ray.io does not serve ray.io/v2 \(served: v1\)"),
    (dict(gpu_nodes={"cpu-1": 0, "cpu-2": 0}), ["vllm"], [],
     r"no node has nvidia.com/gpu allocatable >= 1 \(nodes: cpu-1 0, cpu-2 0\): install the NVIDIA device plugin"),
    (dict(), ["vllm"], [{"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {
        "volumes": [{"name": "hf", "persistentVolumeClaim": {"claimName": "hf-cache"}}]}}}}],
     r"PersistentVolumeClaim hf-cache not found in namespace layerbench: the run's pods use it"),
])
def test_preflight_failures(setup: dict[str, Any], stacks: list[str], objects: list[dict[str, Any]],
                            error: str) -> None:
    with Emulator(**setup) as emu, connect(emu) as c:
        with pytest.raises(LayerbenchError, match=error):
            preflight(c, ClusterSettings(), stacks, objects)


def test_a_serverless_default_is_a_warning_naming_the_annotation_each_service_carries() -> None:
    """KServe's own install defaults to Serverless; each InferenceService asks for RawDeployment, which the
    controller honours, so a stock install is not refused: the warning says what the run relies on and the fix
    should the controller go Knative all the same (the wait then stops with it: test_k8s_kserve_wait.py)."""
    with Emulator(kserve_mode="Serverless") as emu, connect(emu) as c:
        warnings = preflight(c, ClusterSettings(gpus=0), ["kserve"], [isvc("i")])
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith("KServe's default deployment mode is Serverless; every InferenceService "
                                      "layerbench creates asks for serving.kserve.io/deploymentMode: RawDeployment")
        assert "set defaultDeploymentMode to RawDeployment in ConfigMap kserve/inferenceservice-config, key " \
               "deploy" in warnings[0]
        assert "ConfigMap kserve/inferenceservice-config" in c.hints["InferenceService"]
    with Emulator(kserve_mode="Standard") as emu, connect(emu) as c:
        assert preflight(c, ClusterSettings(gpus=0), ["kserve"], [isvc("i")]) == [] and c.hints == {}
    assert deployment_mode('{\n  # "defaultDeploymentMode": "Serverless",\n  "defaultDeploymentMode": "Standard"\n}') \
        == "Standard"


@pytest.mark.parametrize("forbidden", [("configmaps", "kserve", "inferenceservice-config"),
                                       ("namespaces", "", "kserve")])
def test_a_tenant_who_may_not_read_kserves_namespace_gets_a_warning_not_a_crash(forbidden) -> None:
    """A user confined to their own namespace is answered 403 for KServe's ConfigMap (or the namespace itself, a
    cluster-scoped read): preflight says what it could not check and goes on, as it does for CRDs and nodes."""
    with Emulator() as emu, connect(emu) as c:
        emu.forbidden.add(forbidden)
        warnings = preflight(c, ClusterSettings(gpus=0), ["kserve"], [isvc("i")])
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"cannot check KServe's install in namespace kserve (403 Forbidden: "
                                  f'{forbidden[0]} "{forbidden[2]}" is forbidden: User "system:serviceaccount:'), \
        warnings[0]
    assert "RawDeployment" in warnings[0]


# --- a real cluster ---------------------------------------------------------------------------------
@pytest.mark.cluster
def test_preflight_on_a_real_cluster() -> None:
    """Read-only: preflight against the kubeconfig's cluster (LAYERBENCH_K8S_STACKS, default vllm; GPUs per
    engine pod from LAYERBENCH_K8S_GPUS, default 1)."""
    env = os.environ.get("KUBECONFIG", "")
    paths = [p for p in env.split(os.pathsep) if p] if env else [os.path.expanduser("~/.kube/config")]
    if not any(os.path.isfile(p) for p in paths):
        pytest.skip("no kubeconfig (KUBECONFIG or ~/.kube/config)")
    stacks = os.environ.get("LAYERBENCH_K8S_STACKS", "vllm").split(",")
    settings = ClusterSettings(gpus=int(os.environ.get("LAYERBENCH_K8S_GPUS", "1")))
    with Cluster.connect(settings.namespace, "preflight-test") as c:
        assert isinstance(preflight(c, settings, stacks), list)
