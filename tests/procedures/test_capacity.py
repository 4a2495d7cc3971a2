"""`make capacity`: the search on its own (a probe of known outcome), then the whole command against the reference
engine, whose capacity is known by construction: with max_num_seqs slots and requests far longer than the TTFT
bound, one request more than the slots waits most of a request for its first token (queueing); with
`interference_above`, tokens slow down eightfold once more requests run (prefill interference)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.capacity import judge
from harness.cli.main import main
from harness.procedures.capacity import coarse_levels, search
from harness.profile.schema import LoadProfile
from harness.schemas import SLA, CapacitySummary, Probe

SLA_T = SLA(ttft_p95_s=0.05, itl_p95_s=0.02)


def fake(limit: float, ttft_over: bool = True):
    """A probe that holds up to `limit`; above it TTFT (or ITL) breaks its bound."""
    seen: list[float] = []

    def probe(x: float, phase) -> Probe:
        seen.append(x)
        held = x <= limit
        ttft, itl = (20.0, 5.0) if held else ((200.0, 5.0) if ttft_over else (20.0, 60.0))
        return Probe(level=x, phase=phase, held=held, why=[] if held else ["broke"], ttft_p95_ms=ttft, itl_p95_ms=itl,
                     tok_s=100 * x, goodput=1.0, error_share=0.0, waiting_max=x - limit if not held else 0.0,
                     running_max=min(x, limit), kv_cache_usage_max=0.01 * x)

    return probe, seen


def test_coarse_sweep_then_bisection_finds_the_exact_break():
    probe, seen = fake(13)
    probes = search(probe, [1, 2, 4, 8, 16, 32], integer=True)
    assert seen == [1, 2, 4, 8, 16, 12, 14, 13]  # stops at the first broken coarse level, then bisects 8..16
    r = judge("stack", "x", "concurrency", SLA_T, probes)
    assert r.max_concurrency == 13 and r.broke_at == 14 and r.reached
    assert r.how == "queueing" and r.tok_s_at_capacity == 1300
    assert r.kv_usage_before_break == pytest.approx(0.13)


def test_a_search_the_host_contradicts_says_so():
    probes = [Probe(level=x, phase="coarse", held=held, ttft_p95_ms=t, itl_p95_ms=5.0, tok_s=1.0, goodput=1.0,
                    error_share=0.0, waiting_max=0.0, running_max=x, kv_cache_usage_max=0.0)
              for x, held, t in ((1, True, 20.0), (2, False, 60.0), (4, True, 48.0), (8, False, 90.0))]
    r = judge("stack", "x", "concurrency", SLA_T, probes)
    assert r.max_concurrency == 4
    assert any("c=4 held although c=2 broke" in w for w in r.warnings)
    assert any("within 10% of a bound: c=4 (TTFT p95 48 ms" in w for w in r.warnings)
    probe, _ = fake(13)
    assert judge("stack", "x", "concurrency", SLA_T, search(probe, [1, 2, 4, 8, 16], integer=True)).warnings == []
    # what this host did: every level held, but c=3's TTFT p95 was a third of c=2's
    noisy = [Probe(level=x, phase="coarse", held=x < 4, ttft_p95_ms=t, itl_p95_ms=5.0, tok_s=1.0, goodput=1.0,
                   error_share=0.0, waiting_max=0.0, running_max=x, kv_cache_usage_max=0.0)
             for x, t in ((1, 10.0), (2, 36.0), (3, 13.0), (4, 80.0))]
    r = judge("stack", "x", "concurrency", SLA_T, noisy)
    assert r.max_concurrency == 3 and any("TTFT p95 fell as load rose (c=2 36 ms, c=3 13 ms)" in w for w in r.warnings)


def test_a_client_bound_level_is_never_reported_as_the_engines_limit():
    probes = [Probe(level=x, phase="coarse", held=x < 16, why=[] if x < 16 else ["client-bound: ..."],
                    client_bound=x >= 16, ttft_p95_ms=20.0 if x < 16 else 900.0, itl_p95_ms=5.0, tok_s=100 * x,
                    goodput=1.0, error_share=0.0, waiting_max=0.0, running_max=x, kv_cache_usage_max=0.0)
              for x in (1, 4, 8, 16)]
    r = judge("stack", "x", "concurrency", SLA_T, probes)
    assert r.max_concurrency == 8 and not r.reached and r.broke_at is None
    assert r.message.startswith("at least c=8") and "client-bound" in r.message and "client_procs" in r.message


def test_itl_break_is_prefill_interference():
    probe, _ = fake(5, ttft_over=False)
    r = judge("stack", "x", "concurrency", SLA_T, search(probe, [1, 2, 4, 8], integer=True))
    assert r.max_concurrency == 5 and r.how == "prefill interference" and "gaps between tokens" in r.how_text


def test_ttft_break_with_nothing_waiting_is_a_slow_first_token_not_a_queue():
    probe, _ = fake(4)
    probes = search(probe, [1, 2, 4, 8], integer=True)
    for p in probes:
        p.waiting_max, p.running_max = 0.0, p.level  # the engine's gauges were read: all ran, none waited
    r = judge("stack", "x", "concurrency", SLA_T, probes)
    assert r.max_concurrency == 4 and r.how == "slow first token" and "not a queue" in r.how_text


def test_requests_held_in_front_of_the_engine_are_a_queue_in_the_layer():
    probe, _ = fake(2)
    probes = search(probe, [1, 2, 4], integer=True)
    for p in probes:
        p.waiting_max, p.running_max = 0.0, min(p.level, 2.0)  # a layer that forwards two at a time
    r = judge("stack", "x", "concurrency", SLA_T, probes)
    assert r.how == "queueing" and "at most 2 of the 3 requests ran in the engine" in r.how_text


def test_no_level_holds_is_capacity_zero_naming_the_lowest_level():
    probe, seen = fake(0.5)
    r = judge("stack", "x", "concurrency", SLA_T, search(probe, [1, 2, 4], integer=True))
    assert seen == [1] and r.max_concurrency == 0
    assert r.message.startswith("capacity 0") and "c=1" in r.message and "TTFT p95 200 ms" in r.message


def test_every_level_holding_is_a_lower_bound_not_a_capacity():
    probe, _ = fake(1000)
    r = judge("stack", "x", "concurrency", SLA_T, search(probe, [1, 2, 4], integer=True))
    assert r.max_concurrency == 4 and not r.reached and "at least" in r.message


def test_open_loop_rates_bisect_to_a_narrow_bracket():
    probe, seen = fake(10.0)
    r = judge("stack", "x", "rate", SLA_T, search(probe, [2.0, 4.0, 8.0, 16.0], integer=False))
    assert 8.0 <= r.max_rate <= 10.0 and r.broke_at / r.max_rate <= 1.1 + 1e-9


def test_coarse_levels_double_past_the_profile_up_to_the_ceiling():
    p = LoadProfile(name="t", concurrency=[1, 4], requests=20)
    assert coarse_levels(p, 32) == [1, 4, 8, 16, 32]
    assert coarse_levels(p, 3) == [1, 2]  # the profile's 4 is above the ceiling; doubling goes on from 1


def test_lost_capacity_is_one_number():
    probe, _ = fake(8)
    base = judge("baseline", "sim", "concurrency", SLA_T, search(probe, [2, 4, 8, 16], integer=True))
    probe, _ = fake(2)
    stack = judge("stack", "sim-proxy", "concurrency", SLA_T, search(probe, [2, 4, 8, 16], integer=True))
    s = CapacitySummary(run_id="r", stack="sim-proxy", profile="t", sla=SLA_T, scrape_policy="interval",
                        capacity=stack, baseline=base)
    s.finish()
    assert s.lost_to_layer_pct == pytest.approx(75.0)


def capacity(tmp_path: Path, write_profile, *args: str, sla_ttft: str = "0.05") -> tuple[int, dict, Path]:
    profile = write_profile(concurrency=[2], requests=20, requests_per_concurrency=0, output_tokens=16,
                            input_tokens=32, scrape_interval_s=0.1, min_duration_s=0.2, warmup_sweep=False)
    rc = main(["capacity", "--profile", str(profile), "--sla-ttft-p95", sla_ttft, "--results-dir",
               str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports"), *args])
    run = next((tmp_path / "results").iterdir())
    return rc, json.loads((run / "summary.json").read_text()), tmp_path / "reports" / run.name


@pytest.mark.slow  # ~20 s: two deployments searched level by level
@pytest.mark.alone
def test_capacity_of_the_engine_and_behind_a_layer_that_caps_it(tmp_path, write_profile):
    # engine: 4 slots, 20 + 15 x 20 = 320 ms requests: a fifth request waits up to 80 ms (> the 50 ms bound)
    # layer: forwards at most 2 requests at once, so 3 in flight already wait in the proxy
    rc, s, report = capacity(tmp_path, write_profile, "--stack", "sim-proxy", "--baseline", "--max-level", "16",
                             "--opt", "ttft_ms=20", "--opt", "itl_ms=20", "--opt", "max_num_seqs=4",
                             "--opt", "max_ongoing=2")
    assert rc == 0, s
    assert s["baseline"]["max_concurrency"] == 4 and s["capacity"]["max_concurrency"] == 2
    assert s["lost_to_layer_pct"] == pytest.approx(50.0)
    assert s["baseline"]["how"] == "queueing" and s["capacity"]["how"] == "queueing"
    # the engine's own gauges were sampled under load (interval scraping): the 429-threshold candidates
    assert s["baseline"]["running_before_break"] == 4 and s["baseline"]["waiting_before_break"] is not None
    broke = next(p for p in s["baseline"]["probes"] if p["level"] == 5)
    assert broke["waiting_max"] >= 1  # the fifth request queued in the engine
    md = (report / "report.md").read_text()
    assert "capacity lost to the layer: 50%" in md and "429 threshold" in md
    assert (report / "capacity.png").stat().st_size > 0 and (report / "report.html").exists()


@pytest.mark.slow
@pytest.mark.alone
def test_capacity_broken_by_token_gaps_is_prefill_interference(tmp_path, write_profile):
    rc, s, _ = capacity(tmp_path, write_profile, "--stack", "sim", "--sla-itl-p95", "0.02", "--max-level", "8",
                        "--opt", "ttft_ms=10", "--opt", "itl_ms=4", "--opt", "interference_above=3",
                        "--opt", "interference_itl_ms=40", sla_ttft="0.5")
    assert rc == 0
    assert s["capacity"]["max_concurrency"] == 3 and s["capacity"]["how"] == "prefill interference"


@pytest.mark.slow
@pytest.mark.alone
def test_capacity_in_an_open_loop_is_searched_in_rates(tmp_path, write_profile):
    # one slot, 10 + 15 x 2 = 40 ms a request: 25 req/s is all it can serve. At 12 req/s (half of it) a request
    # rarely waits long; at 48 req/s the queue grows by a request every 40 ms, past the bound within the window
    profile = write_profile(rates=[12.0], requests=60, output_tokens=16, input_tokens=32, scrape_interval_s=0.1,
                            min_duration_s=0.2, warmup_sweep=False)
    rc = main(["capacity", "--stack", "sim", "--profile", str(profile), "--sla-ttft-p95", "0.2", "--max-level", "48",
               "--results-dir", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports"),
               "--opt", "ttft_ms=10", "--opt", "itl_ms=2", "--opt", "max_num_seqs=1"])
    s = json.loads((next((tmp_path / "results").iterdir()) / "summary.json").read_text())["capacity"]
    assert rc == 0 and s["kind"] == "rate" and s["max_concurrency"] is None
    assert [p["level"] for p in s["probes"]][:1] == [12.0] and 12.0 <= s["max_rate"] < 48.0
    assert s["broke_at"] is not None and s["broke_at"] / s["max_rate"] <= 2.0 and s["how"] == "queueing"


@pytest.mark.slow
@pytest.mark.alone
def test_an_sla_no_level_meets_is_capacity_zero(tmp_path, write_profile):
    rc, s, report = capacity(tmp_path, write_profile, "--stack", "sim", "--opt", "ttft_ms=30", sla_ttft="0.001")
    assert rc == 0 and s["capacity"]["max_concurrency"] == 0
    assert [p["level"] for p in s["capacity"]["probes"]] == [2]  # nothing above the lowest level is tried
    assert "capacity 0" in (report / "report.md").read_text()


def test_gpu_price_must_be_a_positive_number(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as e:
        main(["capacity", "--stack", "sim", "--gpu-hourly-usd", "-2", "--results-dir", str(tmp_path)])
    assert e.value.code == 2 and "positive number" in capsys.readouterr().err
    monkeypatch.setenv("GPU_HOURLY_USD", "two dollars")
    assert main(["capacity", "--stack", "sim", "--results-dir", str(tmp_path)]) == 2
    assert "GPU_HOURLY_USD must be a number" in capsys.readouterr().err and not any(tmp_path.iterdir())
