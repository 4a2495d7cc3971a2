"""client_procs: a level's slots or rate split across several load processes that open its window together, their
records merged into the run with every request exactly once. Against the reference engine."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.load.workers import US_PER_EVENT, auto_note, procs_for
from harness.schemas import RunSummary


def _run(tmp_path: Path, write_profile, **fields) -> tuple[int, RunSummary, Path]:
    profile = write_profile(**{"output_tokens": 4, "input_tokens": 32, "warmup_sweep": False, "warmup_waves": 0,
                               "requests_per_concurrency": 0, **fields})
    rc = main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / "results"),
               "--opt", "ttft_ms=0", "--opt", "itl_ms=0"])
    run = next((tmp_path / "results").iterdir())
    return rc, RunSummary.model_validate_json((run / "summary.json").read_text()), run


def _measured(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "requests.jsonl").read_text().splitlines()) if r["phase"] == "measure"]


@pytest.mark.slow  # 10,000 requests through two client processes (~30 s here)
@pytest.mark.alone
def test_ten_thousand_requests_in_two_processes_each_recorded_once(tmp_path, write_profile):
    rc, s, run = _run(tmp_path, write_profile, concurrency=[32], requests=10_000, client_procs=2)
    assert rc == 0, s.stopped
    (lv,) = s.levels
    records = _measured(run)
    assert lv.sent == 10_000 == len(records) == lv.stats.sent
    per_worker = Counter(r["worker"] for r in records)
    assert per_worker == {0: 5_000, 1: 5_000}  # each process sent its half of the slots' requests
    keys = Counter((r["worker"], r["index"]) for r in records)
    assert len(keys) == 10_000 and max(keys.values()) == 1  # none counted twice
    assert len({r["t_start_ns"] for r in records}) > 9_000  # one clock: the two halves interleave in time
    w0 = [r["t_start_ns"] for r in records if r["worker"] == 0]
    w1 = [r["t_start_ns"] for r in records if r["worker"] == 1]
    assert min(w1) < max(w0) and min(w0) < max(w1)  # both sent through the same window
    assert len(lv.workers) == 2 and all(h.cpu_pct > 0 for h in lv.workers)
    assert not list(run.glob("requests-w*.jsonl"))  # the workers' own files were merged and removed
    meta = json.loads((run / "run.json").read_text())
    assert meta["client_procs"]["setting"] == 2


@pytest.mark.slow
@pytest.mark.alone
def test_an_open_loop_rate_is_split_and_both_halves_keep_their_schedule(tmp_path, write_profile):
    rc, s, run = _run(tmp_path, write_profile, rates=[200], requests=400, min_duration_s=2, client_procs=2)
    assert rc == 0, s.stopped
    (lv,) = s.levels
    records = _measured(run)
    assert lv.sent == len(records) >= 400
    assert set(Counter(r["worker"] for r in records)) == {0, 1}
    # together, the level's rate: the schedule the two halves drew (400 Poisson arrivals: ~5% sd about 200)
    assert lv.stats.scheduled_rate == pytest.approx(200, rel=0.15)
    for w in (0, 1):  # each half drew its own half of it
        due = sorted(r["t_due_ns"] for r in records if r["worker"] == w)
        assert (len(due) - 1) / ((due[-1] - due[0]) / 1e9) == pytest.approx(100, rel=0.2), w
    # keeping to it is the host's doing (a loaded 2-core CI host sent at 168 req/s, 2026-12-07): where the client
    # fell behind, the level says so rather than passing as 200 req/s
    if lv.stats.achieved_rate < 0.85 * lv.stats.scheduled_rate:
        assert lv.stats.off_schedule, lv.stats


def test_auto_stays_at_one_process_on_a_host_without_cores_for_the_client(tmp_path, write_profile):
    rc, s, run = _run(tmp_path, write_profile, concurrency=[4], requests=40)
    assert rc == 0
    assert all(lv.workers == [] for lv in s.levels)  # one process: nothing split
    why = json.loads((run / "run.json").read_text())["client_procs"]
    if why["cores"] == 1:
        assert why["setting"] == "auto" and "1 process" in why["why"]


def test_procs_for_sizes_from_the_expected_event_rate_within_the_cores():
    # 74 us per event: one process at half a core holds ~6,750 events/s
    assert procs_for("auto", 64, False, None, 4, 74.0) == 1  # nothing measured yet
    assert procs_for("auto", 64, False, 5_000, 4, 74.0) == 1
    assert procs_for("auto", 64, False, 20_000, 4, 74.0) == 3
    assert procs_for("auto", 256, False, 200_000, 4, 74.0) == 4  # never more than the client's cores
    assert procs_for("auto", 2, False, 200_000, 8, 74.0) == 2  # never more than the level's slots
    # the default is the benchmark's figure: a level that needs more than half a core gets a second process
    half_core = 0.5e6 / US_PER_EVENT
    assert procs_for("auto", 64, False, 0.9 * half_core, 4) == 1
    assert procs_for("auto", 64, False, 1.1 * half_core, 4) == 2
    assert procs_for(3, 64, False, None, 1) == 3  # a number is taken as given
    assert procs_for(3, 500.0, True, None, 1) == 3  # an open-loop rate has no slots to run out of
    assert "1 process" in auto_note(1, 2, False) and "client_cpus" in auto_note(4, 16, True)


def test_client_procs_out_of_range_is_refused(tmp_path, write_profile, capsys):
    profile = write_profile(concurrency=[4], requests=40, client_procs=0)
    rc = main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / "results")])
    assert rc != 0 and "client_procs" in capsys.readouterr().err
