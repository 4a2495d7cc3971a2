"""GPU telemetry and the VRAM-release check against a fake NVML (tests/fakes/nvml/pynvml.py) whose readings
follow a script: the sampler process's per-window figures, the wait for memory to come back between
deployments, the failure naming the process that holds it, DCGM's counters where `dcgmi` answers, and the
report's GPU table in place of the CPU-host reading."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.errors import LayerbenchError
from harness.load import gpu_telemetry as gt

FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
def nvml(tmp_path, monkeypatch):
    """Write a script for the fake NVML; it is imported as `pynvml` here and in spawned sampler processes."""
    monkeypatch.syspath_prepend(str(FAKES / "nvml"))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    path = tmp_path / "nvml.json"
    monkeypatch.setenv("FAKE_NVML_SCRIPT", str(path))

    def script(timeline: list[dict], gpus: int = 2) -> float:
        t0 = time.time()
        path.write_text(json.dumps({"t0": t0, "gpus": [{"name": "NVIDIA H100 80GB HBM3", "total_mib": 81559}] * gpus,
                                    "timeline": timeline}))
        return t0

    yield script
    sys.modules.pop("pynvml", None)


def test_without_a_driver_nvml_is_unavailable_and_nothing_is_sampled(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FAKES / "nvml"))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.delenv("FAKE_NVML_SCRIPT", raising=False)
    module, why = gt.load_nvml()
    assert module is None and "NVML Shared Library Not Found" in why
    assert gt.telemetry_note([0]).startswith("no GPU telemetry") and gt.telemetry_note([]) is None
    with gt.GpuSampler([], tmp_path / "g.jsonl") as s:
        assert s.pid is None and s.window(0, 1e12) == []
    sys.modules.pop("pynvml", None)


def test_the_sampler_process_summarises_each_window_per_gpu(nvml, tmp_path):
    nvml([{"after_s": 0, "gpu": 0, "used_mib": 20_000, "util": 10, "power_w": 100, "sm_mhz": 1500},
          {"after_s": 0, "gpu": 1, "used_mib": 500, "util": 0, "power_w": 70, "sm_mhz": 345},
          {"after_s": 1.5, "gpu": 0, "used_mib": 60_000, "util": 90, "power_w": 600, "sm_mhz": 1980}])
    out = tmp_path / "gpu.jsonl"
    with gt.GpuSampler([0, 1], out) as sampler:
        assert sampler.pid is not None and sampler.pid != os.getpid()
        deadline = time.monotonic() + 30
        while len({d["util"] for d in sampler.lines() if d["i"] == 0}) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # wait for readings of both phases of the script
        t1 = time.monotonic()
        time.sleep(1.2)
        late = sampler.window(t1, time.monotonic())
    assert out.exists() and all({"t", "i", "util", "mem_mib", "power_w", "sm_mhz"} <= set(d) for d in sampler.lines())
    g0, g1 = late
    assert (g0.index, g1.index) == (0, 1) and g0.samples >= 2
    assert g0.util_pct_mean == 90 and g0.memory_used_mib_max == pytest.approx(60_000)
    assert g0.power_w_mean == pytest.approx(600) and g0.sm_clock_mhz_mean == 1980
    assert g1.util_pct_mean == 0 and g1.memory_used_mib_max == pytest.approx(500)
    assert g0.tensor_active_mean is None  # no dcgmi on this PATH
    whole = gt.summarise(sampler.lines(), 0, time.monotonic())[0]
    assert whole.util_pct_max == 90 and 10 < whole.util_pct_mean < 90


def fake_dcgmi(nvml, tmp_path: Path, monkeypatch, body: str) -> None:
    """One GPU under the scripted NVML, and a `dcgmi` on PATH that runs `body` (sh)."""
    nvml([{"after_s": 0, "gpu": 0, "used_mib": 1000, "util": 50, "power_w": 300, "sm_mhz": 1800}], gpus=1)
    dcgmi = tmp_path / "bin" / "dcgmi"
    dcgmi.parent.mkdir()
    dcgmi.write_text("#!/bin/sh\n" + body)
    dcgmi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{dcgmi.parent}{os.pathsep}{os.environ['PATH']}")


def test_dcgm_counters_are_read_where_dcgmi_answers(nvml, tmp_path, monkeypatch):
    fake_dcgmi(nvml, tmp_path, monkeypatch, "# dcgmi dmon's layout: two header rows, then one row per GPU per "
               "interval\necho '#Entity   SMACT        TENSO'\necho 'ID'\n"
               "while true; do echo 'GPU 0     0.812        0.437'; sleep 0.2; done\n")
    assert "dcgmi" not in gt.telemetry_note([0])  # nothing is claimed before a sample arrives
    with gt.GpuSampler([0], tmp_path / "g.jsonl") as sampler:
        deadline = time.monotonic() + 30
        while not any("tensor_active" in d for d in sampler.lines()) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.6)
        (g,) = sampler.window(0, time.monotonic())
    assert g.tensor_active_mean == pytest.approx(0.437) and g.sm_active_mean == pytest.approx(0.812)
    assert g.util_pct_mean == 50
    assert re.search(r"from dcgmi: \d+ samples", sampler.dcgm())


def test_dcgm_counters_are_not_claimed_when_no_sample_arrives(nvml, tmp_path, monkeypatch):
    """dcgmi on PATH without a running nv-hostengine: its message as NVIDIA/DCGM#43 and #57 record it."""
    fake_dcgmi(nvml, tmp_path, monkeypatch,
               "echo 'Error: unable to establish a connection to the specified host: localhost'\n"
               "echo 'Error: Unable to connect to host engine. Host engine connection invalid/disconnected.'\nexit 1\n")
    with gt.GpuSampler([0], tmp_path / "g.jsonl") as sampler:
        deadline = time.monotonic() + 30
        while not ({"dcgm_exit", "util"} <= {k for d in sampler.lines() for k in d}) and time.monotonic() < deadline:
            time.sleep(0.2)  # dmon's exit, and one NVML reading
    note = sampler.dcgm()
    assert note.startswith("DCGM profiling counters: none arrived (dcgmi dmon exited 1: Error: unable to establish")
    assert "nv-hostengine" in note and sampler.window(0, time.monotonic())[0].tensor_active_mean is None


def test_dmon_rows_parse_and_headers_do_not():
    assert gt.parse_dmon_row("GPU 3     0.512   N/A\n") == {"i": 3, "sm_active": 0.512, "tensor_active": None}
    assert gt.parse_dmon_row("#Entity   SMACT  TENSO") is None and gt.parse_dmon_row("ID") is None


def test_the_next_deployment_waits_until_gpu_memory_is_back(nvml):
    # the engine takes its memory 0.3 s in: at 10 ms, a fresh clone's loaded fast lane read 70,000 MiB as the
    # guard's "before" (its first NVML import took longer), as the next test found before it
    nvml([{"after_s": 0, "gpu": 0, "used_mib": 400}, {"after_s": 0.3, "gpu": 0, "used_mib": 70_000},
          {"after_s": 2.0, "gpu": 0, "used_mib": 450}], gpus=1)
    guard = gt.VramGuard([0])
    assert guard.before[0] == pytest.approx(400)
    time.sleep(0.4)
    waited = guard.wait_released("baseline vllm", timeout=20, poll_s=0.1)
    assert waited is not None and 1.0 < waited < 10  # it waited for the script's release, and no longer


def test_memory_that_stays_held_fails_naming_the_process(nvml):
    me = os.getpid()
    nvml([{"after_s": 0, "gpu": 0, "used_mib": 400},
          {"after_s": 0.3, "gpu": 0, "used_mib": 30_000, "processes": [{"pid": me, "used_mib": 29_000}]}], gpus=1)
    guard = gt.VramGuard([0])  # reads 400 MiB: its first NVML import took longer than 10 ms in a full-suite run
    assert guard.before[0] == pytest.approx(400)
    time.sleep(0.4)
    with pytest.raises(LayerbenchError) as e:
        guard.wait_released("baseline vllm", timeout=0.5, poll_s=0.1)
    text = str(e.value)
    assert "GPU memory was not returned 0 s after baseline vllm was torn down" in text or "after baseline vllm" in text
    assert "GPU 0: 30,000 MiB in use against 400 MiB before the first deployment" in text
    # named as the process runs (pytest, or an xdist worker's python)
    assert f"pid {me} (" in text and "holds 29,000 MiB" in text and psutil.Process(me).name() in text


def test_a_host_without_gpus_has_nothing_to_wait_for():
    assert gt.VramGuard([]).wait_released("x", timeout=0) is None


@pytest.mark.slow  # a reference-engine compare: 5 s
def test_a_compare_fails_when_the_baseline_keeps_its_gpu_memory(nvml, tmp_path, monkeypatch):
    """Two reference-engine deployments on 'GPU 0': memory held after the first fails the second, named."""
    from rich.console import Console

    from harness.measure.run import Output, Run
    from harness.measure.session import baseline_then_stack
    from harness.profile.schema import LoadProfile
    from harness.results import RunWriter
    from stacks.base import DeploySettings
    from stacks.sim import SimStack

    me = os.getpid()
    nvml([{"after_s": 0, "gpu": 0, "used_mib": 300, "util": 0},  # before the first deployment
          {"after_s": 0.5, "gpu": 0, "used_mib": 40_000, "util": 80, "processes": [{"pid": me, "used_mib": 39_000}]}],
         gpus=1)
    monkeypatch.setattr(gt, "RELEASE_TIMEOUT_S", 1.0)
    settings = DeploySettings(log_dir=tmp_path / "logs", devices=[0], options={"ttft_ms": 5, "itl_ms": 2})
    profile = LoadProfile(name="t", concurrency=[2], requests=20, requests_per_concurrency=0, output_tokens=4,
                          input_tokens=32, warmup_sweep=False, scrape="none", min_duration_s=1.5)
    writer = RunWriter("gpu-held", tmp_path / "results")
    run = Run(profile, writer, Output.to(Console(quiet=True)), 1)
    measured = baseline_then_stack([("baseline", SimStack(settings)), ("stack", SimStack(settings))], run)
    assert "stack" in measured.failures and "stack" not in measured.runs
    why = measured.failures["stack"]
    assert f"pid {me}" in why and "after baseline sim was torn down" in why
    base = measured.runs["baseline"]
    (lv,) = base.levels
    assert lv.gpu and lv.gpu[0].index == 0 and lv.gpu[0].util_pct_mean == 80  # the window's NVML figures
    assert base.gpu_telemetry.startswith("NVML every 0.5 s on GPU 0") and base.devices == [0]
    writer.finish("failed", "test")


def test_a_gpu_host_report_shows_the_model_the_gpu_table_and_no_cpu_host_reading():
    from harness.reporting.report import context_bullets
    from harness.reporting.report_tables import CPU_HOST_NOTE, detail_tables
    from harness.schemas import ServedModel
    from tests.reporting.test_report_decision import compare, pair

    def with_gpu(levels, util, mem):
        for lv in levels:
            lv.gpu = [gt.GpuWindow(index=0, samples=10, util_pct_mean=util, util_pct_max=util,
                                   memory_used_mib_max=mem, power_w_mean=400.0, sm_clock_mhz_mean=1980.0)]
        return levels

    s = compare(with_gpu(pair(16, 1000.0), 84.0, 70_000.0), with_gpu(pair(16, 700.0), 61.0, 70_500.0))
    model = ServedModel(source="hub", id="Qwen/Qwen2.5-1.5B-Instruct",
                        revision="989aa7980e4cf806f80c7fef2b1adb7bc71aa306", config_digest="a1b2c3d4e5f6",
                        served_name="qwen2.5-1.5b-instruct")
    s = s.model_copy(update={"model": model, "devices": [0], "gpu_host": {
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}], "count": 1}})
    head = context_bullets(s)
    assert head[0].startswith("served: **Qwen/Qwen2.5-1.5B-Instruct @ 989aa7980e4c, config a1b2c3d4e5f6**")
    assert "on GPU 0 (NVIDIA H100 80GB HBM3), tensor_parallel_size 1" in head[0]
    tables = {t[0]: t for t in detail_tables(s)}
    title, caption, header, rows = tables["GPU telemetry"]
    assert header[2:5] == ["GPU util", "memory GiB", "power W"]
    assert rows[0][2:5] == ["84%", "68.4", "400"] and rows[1][2] == "61%"
    assert CPU_HOST_NOTE not in tables["Where the CPU went (cores)"][1]
    assert "engine's model runs on the GPU" in tables["Where the CPU went (cores)"][1]
    cpu = compare(pair(16, 1000.0), pair(16, 700.0))  # a CPU host: no GPU table, the CPU-host reading
    cpu_tables = {t[0]: t for t in detail_tables(cpu)}
    assert "GPU telemetry" not in cpu_tables and CPU_HOST_NOTE in cpu_tables["Where the CPU went (cores)"][1]


def test_the_gpu_plot_is_drawn_only_where_gpus_were_read(tmp_path):
    from harness.reporting.plots import plots
    from tests.reporting.test_report_decision import compare, pair

    base, stack = pair(16, 1000.0), pair(16, 700.0)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "gpu").mkdir()
    assert "gpu_util.png" not in plots(compare(base, stack), tmp_path / "cpu")
    for lv, util in zip(base + stack, (80.0, 82.0, 60.0, 62.0), strict=True):
        lv.gpu = [gt.GpuWindow(index=0, samples=4, util_pct_mean=util)]
    made = plots(compare(base, stack), tmp_path / "gpu")
    assert "gpu_util.png" in made and (tmp_path / "gpu" / "gpu_util.png").stat().st_size > 1000
