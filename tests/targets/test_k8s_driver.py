"""The NVIDIA driver against each engine image's CUDA, before any image is pulled: on the k8s target from GPU
feature discovery's node labels (against the API emulator), on the docker target from this host's driver and
again in commands.sh on the GPU host (a fake nvidia-smi). The node labels below are the ones GFD sets, named as in
NVIDIA/k8s-device-plugin internal/lm/nvml.go (newVersionLabeler: nvidia.com/cuda.driver-version.* and the
deprecated nvidia.com/cuda.driver.*, both written for one driver)."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from harness.errors import LayerbenchError
from harness.host import gpus
from harness.profile.loading import load_profile
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.docker import render_docker, script
from harness.targets.k8s.driver_check import needed_driver, node_driver, script_check
from harness.targets.k8s.images import DEFAULT_KSERVE_HF_IMAGE, DEFAULT_RAY_IMAGE, DEFAULT_TRITON_IMAGE, image_cuda
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.preflight import preflight
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.runner import RunOptions, run_plan
from stacks.base import DeploySettings, get_stack
from tests.k8s_emulator import Emulator

RUN = "20261201-101010-compare-ray-abc123"
LOAD = "registry.test/layerbench:1"
PROFILE = load_profile("quick")
FAKES = Path(__file__).resolve().parents[1] / "fakes" / "bin"


def gfd_labels(driver: str, cuda: str, deprecated_only: bool = False) -> dict[str, str]:
    """What GFD labels a GPU node with for `driver` (its CUDA: the highest the driver runs)."""
    major, minor, rev = (driver.split(".") + [""])[:3]
    cmajor, cminor = cuda.split(".")
    old = {"nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor,
           "nvidia.com/cuda.driver.rev": rev, "nvidia.com/cuda.runtime.major": cmajor,
           "nvidia.com/cuda.runtime.minor": cminor}
    if deprecated_only:
        return old
    return {**old, "nvidia.com/cuda.driver-version.major": major, "nvidia.com/cuda.driver-version.minor": minor,
            "nvidia.com/cuda.driver-version.revision": rev, "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.runtime-version.major": cmajor, "nvidia.com/cuda.runtime-version.minor": cminor,
            "nvidia.com/cuda.runtime-version.full": cuda}


def host(driver: str) -> gpus.GpuHost:
    return gpus.GpuHost(gpus=tuple(gpus.Gpu(i, "NVIDIA H100 80GB HBM3", f"GPU-{i}", 81559) for i in range(4)),
                        driver=driver, cuda="12.8" if driver.startswith("570") else "13.0")


# --- the table -------------------------------------------------------------------------------------
def test_the_driver_an_images_cuda_needs():
    assert [needed_driver(c) for c in ("13.0", "13.3", "12.9", "12", "11.8", "10.2")] == [580, 580, 525, 525, 450,
                                                                                          None]
    assert image_cuda(DEFAULT_RAY_IMAGE)[0] == image_cuda(DEFAULT_KSERVE_HF_IMAGE)[0] == "13.0"
    assert image_cuda(DEFAULT_TRITON_IMAGE)[0] == "13.1"
    assert image_cuda("vllm/vllm-openai:v0.32.0")[0] == "13.0" and image_cuda("vllm/vllm-openai:v0.20.0")[0] == "13.0"
    assert image_cuda("vllm/vllm-openai:v0.32.0-cu129")[0] == "12.9"
    assert image_cuda("vllm/vllm-openai:v0.11.1")[0] == "12"
    assert image_cuda("registry.test/own-build:1") is None  # not judged
    assert node_driver(gfd_labels("570.133.20", "12.8")) == "570.133.20"
    assert node_driver(gfd_labels("535.104.05", "12.2", deprecated_only=True)) == "535.104.05"
    assert node_driver({"nvidia.com/gpu.present": "true"}) is None


# --- k8s: GFD's labels -----------------------------------------------------------------------------
def cluster(labels: dict[str, dict[str, str]], nodes: dict[str, int] | None = None) -> Emulator:
    emu = Emulator(gpu_nodes=nodes or {"gpu-1": 1}, node_labels=labels)
    emu.put("api/v1", "persistentvolumeclaims", "layerbench", {"metadata": {"name": "hf-cache"}})
    return emu


def connect(emu: Emulator) -> Cluster:
    return Cluster("layerbench", RUN, emu.api_client(), poll_s=0.002, request_timeout_s=5)


def test_a_node_whose_driver_is_too_old_is_refused_before_anything_is_created(tmp_path):
    with cluster({"gpu-1": gfd_labels("570.133.20", "12.8")}) as emu:
        stack = get_stack("ray")(DeploySettings(engine=PROFILE.engine, target="k8s"))
        cs = ClusterSettings(load_image=LOAD)
        plan = render_plan(stack, PROFILE, cs, RUN, LoadCommand("compare", 1))
        with connect(emu) as c, pytest.raises(LayerbenchError) as e:
            run_plan(plan, cs, tmp_path, Console(file=io.StringIO(), width=200), RunOptions(cluster=c))
        text = str(e.value)
        assert text.startswith("no GPU node's driver can run the engine images: node gpu-1 has NVIDIA driver "
                               "570.133.20; vllm/vllm-openai:v0.29.0 is built for CUDA 13.0")
        assert f"node gpu-1 has NVIDIA driver 570.133.20; {DEFAULT_RAY_IMAGE} is built for CUDA 13.0" in text
        assert "which needs driver >= 580" in text and "check_driver: false" in text
        assert emu.created == []  # no probe Job: nothing pulled, nothing deployed


@pytest.mark.parametrize("labels", [gfd_labels("580.95.05", "13.0"), gfd_labels("610.43.02", "13.3"),
                                    gfd_labels("590.44.01", "13.1", deprecated_only=True)])
def test_a_node_with_a_new_enough_driver_passes(labels):
    with cluster({"gpu-1": labels}) as emu, connect(emu) as c:
        assert preflight(c, ClusterSettings(), ["ray"], [], 1, [DEFAULT_RAY_IMAGE, "vllm/vllm-openai:v0.29.0"]) == []


def test_a_cuda_12_image_runs_on_an_r535_node():
    with cluster({"gpu-1": gfd_labels("535.104.05", "12.2")}) as emu, connect(emu) as c:
        assert preflight(c, ClusterSettings(), ["vllm"], [], 1, ["vllm/vllm-openai:v0.19.0",
                                                                 "vllm/vllm-openai:v0.32.0-cu129"]) == []
        with pytest.raises(LayerbenchError, match=r"node gpu-1 has NVIDIA driver 535.104.05; "
                                                  r"vllm/vllm-openai:v0.32.0 is built for CUDA 13.0"):
            preflight(c, ClusterSettings(), ["vllm"], [], 1, ["vllm/vllm-openai:v0.32.0"])
        assert preflight(c, ClusterSettings(check_driver=False), ["vllm"], [], 1, ["vllm/vllm-openai:v0.32.0"]) == []


def test_unlabelled_nodes_are_a_warning_saying_how_to_get_the_labels():
    with cluster({}) as emu, connect(emu) as c:
        (warning,) = preflight(c, ClusterSettings(), ["ray"], [], 1, [DEFAULT_RAY_IMAGE])
        assert warning.startswith("the GPU nodes (gpu-1) carry no driver labels")
        assert "deploy GPU feature discovery" in warning and "gfd.enabled=true" in warning


def test_mixed_nodes_warn_about_the_old_ones_and_ignore_nodes_without_room():
    labels = {"old": gfd_labels("570.133.20", "12.8"), "new": gfd_labels("580.95.05", "13.0"),
              "small": gfd_labels("550.54.15", "12.4")}
    with cluster(labels, {"old": 2, "new": 2, "small": 1}) as emu, connect(emu) as c:
        (warning,) = preflight(c, ClusterSettings(gpus=2), ["ray"], [], 2, [DEFAULT_RAY_IMAGE])
        assert warning.startswith(f"node old has NVIDIA driver 570.133.20; {DEFAULT_RAY_IMAGE}")
        assert "nvidia.com/cuda.driver-version.major" in warning and "small" not in warning


# --- docker: this host, and commands.sh on the GPU host ----------------------------------------------
def render(kind: str, cs: ClusterSettings | None = None, **engine):
    s = get_stack(kind)(DeploySettings(engine=PROFILE.engine.model_copy(update=engine), target="docker"))
    return render_docker(s, PROFILE, cs or ClusterSettings(), RUN, "compare", repeats=1)


def test_docker_on_a_host_whose_driver_is_too_old_is_refused(monkeypatch):
    monkeypatch.setattr(gpus, "host_gpus", lambda: host("570.133.20"))
    with pytest.raises(LayerbenchError, match=r"^this host has NVIDIA driver 570.133.20; vllm/vllm-openai:v0.29.0 "
                                              r"is built for CUDA 13.0, which needs driver >= 580; "):
        render("ray")
    assert render("ray", ClusterSettings(check_driver=False)).sides  # forward compatibility: the user's call
    monkeypatch.setattr(gpus, "host_gpus", lambda: host("580.95.05"))
    assert [s.engine_image for s in render("ray").sides] == ["vllm/vllm-openai:v0.29.0", DEFAULT_RAY_IMAGE]


def run_check(plan, driver: str | None, **env: str) -> subprocess.CompletedProcess:
    """The script's driver check as rendered, on a host whose nvidia-smi reports `driver` (None: no nvidia-smi)."""
    lines = script_check([s.engine_image for s in plan.sides])
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    env = {**os.environ, "PATH": path if driver is None else f"{FAKES}{os.pathsep}{path}", **env}
    if driver:
        env["FAKE_NVIDIA_SMI_DRIVER"] = driver
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(lines) + "\necho CHECKED"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_commands_sh_checks_the_driver_before_anything_is_pulled(monkeypatch):
    monkeypatch.setattr(gpus, "host_gpus", lambda: None)  # rendered away from the GPU host
    plan = render("kserve")
    text = script(plan, ClusterSettings(), "compare --stack kserve")
    assert text.index("nvidia-smi --query-gpu=driver_version") < text.index("docker run --rm --network none")
    old = run_check(plan, "570.133.20")
    assert old.returncode == 4 and "CHECKED" not in old.stdout
    assert "this host has NVIDIA driver 570.133.20; vllm/vllm-openai:v0.32.0 is built for CUDA 13.0, which needs " \
           "driver >= 580" in old.stderr
    assert run_check(plan, "570.133.20", CHECK_DRIVER="0").stdout.strip() == "CHECKED"  # the user's call
    new = run_check(plan, "580.95.05")
    assert new.returncode == 0 and new.stdout.strip() == "CHECKED" and new.stderr == ""
    none = run_check(plan, None)
    assert none.returncode == 0 and "the driver was not checked" not in none.stdout
    assert "nvidia-smi did not name the driver (no answer)" in none.stderr
    unchecked = render("kserve", ClusterSettings(check_driver=False))
    assert "nvidia-smi" not in script(unchecked, ClusterSettings(), "compare --stack kserve")
