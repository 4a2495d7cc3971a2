"""Scrape policy, client placement, core sampling and client health, on the reference engine: the default
scrape policy never reads a metric endpoint inside a measured window; run.json records how the client was
placed; a starved client is told apart from a saturated one."""

from __future__ import annotations

import json
import os

import pytest

from harness.cli.main import main
from harness.load.runner import judge_client
from harness.schemas import Dist


def run_sim(tmp_path, write_profile, **fields):
    profile = write_profile(concurrency=[1, 2], requests=20, requests_per_concurrency=0, output_tokens=8,
                            input_tokens=32, **fields)
    rc = main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / "r"),
               "--opt", "ttft_ms=10", "--opt", "itl_ms=5"])
    assert rc == 0
    run = next((tmp_path / "r").iterdir())
    scrapes = [json.loads(x) for x in (run / "scrapes.jsonl").read_text().splitlines()]
    requests = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
    return run, scrapes, requests


@pytest.mark.slow  # seconds of real load; `make test` runs it, `make test-fast` stays under 2 min
def test_boundary_policy_never_scrapes_inside_a_window(tmp_path, write_profile):
    run, scrapes, requests = run_sim(tmp_path, write_profile, scrape="boundary")
    assert sorted((s["level"], s["phase"]) for s in scrapes) == [(1, "end"), (1, "start"), (2, "end"), (2, "start")]
    assert all(s["ok"] and s["dur_ms"] is not None for s in scrapes)
    # scrapes are written in order: the start mark before a level's first measured request, the end after
    assert [s["phase"] for s in scrapes] == ["start", "end", "start", "end"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scrape_policy"] == "boundary"
    assert summary["levels"][0]["server"]["scrapes"] == 2
    assert "load client" in summary["cores"] and summary["cores"]["load client"]["allowed"]
    meta = json.loads((run / "run.json").read_text())
    assert meta["placement"]["client_nice_requested"] == -5 and "sentence" in meta["placement"]
    assert any(r["phase"] == "warmup-sweep" for r in requests)  # the sim is not eager: every level warmed


@pytest.mark.slow  # seconds of real load; `make test` runs it, `make test-fast` stays under 2 min
def test_interval_policy_polls_during_windows(tmp_path, write_profile):
    _, scrapes, _ = run_sim(tmp_path, write_profile, scrape="interval", scrape_interval_s=0.25, min_duration_s=1.0)
    assert sum(s["phase"] is None for s in scrapes) >= 4


def test_none_policy_scrapes_nothing(tmp_path, write_profile):
    _, scrapes, _ = run_sim(tmp_path, write_profile, scrape="none", warmup_sweep=False)
    assert scrapes == []


def test_deployment_runs_at_the_priority_layerbench_started_with(tmp_path):
    from harness.host import placement
    from stacks.base.procs import ManagedProcess

    before = os.getpriority(os.PRIO_PROCESS, 0)
    p = placement.apply(-5, 1)
    try:
        proc = ManagedProcess("sleeper", ["sleep", "30"], tmp_path / "s.log")
        proc.start()
        try:
            assert os.getpriority(os.PRIO_PROCESS, proc.pid) == before
        finally:
            os.killpg(proc.pid, 9)
            proc.proc.wait()
        assert p.client_nice in (-5, before)  # -5 where permitted, else unchanged and said so
        assert p.client_nice == -5 or p.notes
    finally:
        placement.set_client_nice(before) if os.geteuid() == 0 else None


def test_starved_is_not_saturated():
    lag = Dist.of([12.0] * 95 + [30.0] * 5)
    h = judge_client(4.0, lag, Dist.of([0.1] * 10))
    assert h.starved and not h.saturated
    assert "starved by the deployment" in h.reasons[0] and "timestamps late by up to" in h.reasons[0]
    h = judge_client(97.0, Dist.of([0.5] * 10), Dist.of([0.1] * 10))
    assert h.saturated and not h.starved and "saturated" in h.reasons[0]
    h = judge_client(5.0, Dist.of([0.5] * 10), Dist.of([3.0] * 10))  # idle client's slow wake-ups: fine
    assert not h.saturated and not h.starved


def test_engine_binding_and_cores_sentence():
    from harness.load.topology import cores_sentence, engine_binding
    from harness.schemas import ProcessCores

    log = ("(EngineCore pid=5187) INFO [ompmultiprocessing.py:185] OpenMP thread binding info: \n"
           "(EngineCore pid=5187) INFO [ompmultiprocessing.py:185] \tVLLM_CPU_OMP_THREADS_BIND='auto', "
           "auto_setup=True\n(EngineCore pid=5187) INFO [ompmultiprocessing.py:185] \tlocal_rank=0, core ids=[0]\n"
           "(EngineCore pid=5187) INFO [ompmultiprocessing.py:185] \treserved_cpus=[1]\n")
    assert engine_binding(log) == ["VLLM_CPU_OMP_THREADS_BIND='auto'", "local_rank=0, core ids=[0]",
                                   "reserved_cpus=[1]"]
    text = cores_sentence({"vllm:VLLM::Worker": ProcessCores(allowed=[0], ran_on={0: 1.0}),
                           "load client": ProcessCores(allowed=[0, 1], ran_on={0: 0.2, 1: 0.8})}, 2,
                          engine_binding(log))
    assert text.startswith("2 cores shared: vllm:VLLM::Worker on core 0 (100%), load client on core 0 (20%) + 1 (80%)")
    assert "core ids=[0]" in text
