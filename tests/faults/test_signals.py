"""Ctrl-C (SIGINT) and SIGTERM to layerbench's process group during deploy, the warmup sweep, a level and
teardown: every process the run started is gone within 30 s, results so far are on disk, marked
`interrupted`, readable by `make report`, and requests in flight at the signal are recorded as such."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.cli.main import main
from tests.faults.conftest import (
    SIGNALS,
    Layerbench,
    left_behind,
    lines,
    meta,
    phase_is,
    run_dir,
    shm_and_tmp,
    wait_for,
)

# alone: asserts nothing new is left in /dev/shm or /tmp, where other tests' servers write
pytestmark = [pytest.mark.slow, pytest.mark.alone]


def _sim_log_says_stopping(results: Path):
    def check() -> bool:
        run = run_dir(results)
        return run is not None and any("layerbench-sim: stopping" in p.read_text(errors="replace")
                                       for p in (run / "logs").glob("sim-*.log"))
    return check


# phase -> (profile fields, sim options, what to wait for before signalling)
PHASES = {
    "deploy": ({}, ["startup_delay_s=60"], lambda r: phase_is(r, "sim: deploying")),
    "warmup": ({"warmup_sweep": True, "concurrency": [1, 2, 4], "warmup_waves": 40}, [],
               lambda r: phase_is(r, "sim: warmup sweep")),
    "level": ({"concurrency": [4], "requests": 4000}, [], lambda r: phase_is(r, "sim: c=4")),
    "teardown": ({}, ["shutdown_delay_s=4"], _sim_log_says_stopping),
}


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("phase", list(PHASES))
def test_signal_leaves_nothing_running_and_keeps_results(tmp_path, quick_profile, phase, sig):
    fields, opts, ready = PHASES[phase]
    results = tmp_path / "r"
    before = shm_and_tmp()
    args = ["run", "--stack", "sim", "--profile", str(quick_profile(**fields)), "--results-dir", str(results),
            "--opt", "ttft_ms=20", "--opt", "itl_ms=5"]
    for o in opts:
        args += ["--opt", o]
    lb = Layerbench(args, tmp_path)
    wait_for(f"the {phase} phase", ready(results), lb)
    if phase == "level":
        wait_for("requests in flight", lambda: any(r["phase"] == "measure" for r in lines(
            run_dir(results) / "requests.jsonl")), lb)
    started = wait_for("its server process", lb.descendants, lb)  # the phase is written just before the fork
    t0 = time.monotonic()
    lb.signal_group(sig)
    rc = lb.wait(timeout=60)
    everything_gone = time.monotonic() - t0
    from tests.faults.conftest import gone_within

    assert not gone_within(started, 0.5), lb.output()
    assert everything_gone < 30, f"took {everything_gone:.1f} s\n{lb.output()}"
    print(f"[{phase} {sig.name}] exit {rc} and every process gone {everything_gone:.1f} s after the signal")
    assert rc == 130, lb.output()
    assert "Traceback" not in lb.output(), lb.output()
    run = run_dir(results)
    m = meta(run)
    assert m["status"] == "interrupted" and "finished" in m, (m, lb.output())
    recorded = lines(run / "requests.jsonl")  # every line whole
    if phase == "level":
        assert any(r["error"] == "interrupted" for r in recorded), "in-flight requests are recorded"
        assert "interrupted" in (run / "summary.json").read_text()
    left = left_behind(before)
    assert not left, left  # nothing left in /dev/shm or /tmp
    out = tmp_path / "summary.md"
    assert main(["report", "--results-dir", str(results), "--out", str(out)]) == 0
    assert run.name in out.read_text() and "interrupted" in out.read_text()
