"""What a router buys, against a known truth: two reference engines per side whose prefix cache holds two prompt
blocks each and whose cache hits answer 40 ms sooner, four shared-prefix groups, and the reference proxy in front
of the stack's two engines. The bare side is the two engines with the load client spreading requests in turn.

- cache_aware routing keeps each group on one engine: two groups an engine, every one cached once seen, so hits
  go to ~100% (the baseline's in-turn spread sees four groups an engine, LRU over two: ~50%), and TTFT p95's
  change recovers the configured cut (60 ms to 20 ms);
- round_robin routing places requests as the baseline does: the same hit rate and no TTFT gain (at most the
  proxy's hop);
- an A/A of two bare engines against two bare engines reads the same on every endpoint (within 10%);
- one engine slowed 3x under an in-turn spread: requests stay even (1.0) and the engines hold requests 3:1, a load
  imbalance (max/mean) of 1.5, by Little's law from the engines' own histograms."""

from __future__ import annotations

import math
import re
from pathlib import Path

import httpx
import pytest

from harness.analysis.latency_split import split
from harness.analysis.server_metrics import summarise
from harness.cli.main import main
from harness.reporting.routing import gain_and_hop
from harness.schemas import CompareSummary

# alone: its TTFT figures are the reference engine's configured timing, which a host running real vLLM compares
# beside it stretches (a 60 ms miss read 91 ms there, and 1 run in 5 missed a bound with both cores busy)
pytestmark = [pytest.mark.slow, pytest.mark.alone]

TTFT_MS, SAVES_MS = 60, 40
ENGINE = (f"ttft_ms={TTFT_MS}", "itl_ms=2", "prefix_cache_blocks=2", f"prefix_hit_saves_ms={SAVES_MS}")


def _profile(write_profile, **more) -> Path:
    return write_profile(concurrency=[4], requests=48, requests_per_concurrency=0, output_tokens=4, input_tokens=96,
                         prefix={"groups": 4, "shared_tokens": 48}, warmup_waves=12, warmup_sweep=False, **more)


def _compare(tmp_path: Path, profile: Path, stack: str, *opts: str) -> CompareSummary:
    args = ["compare", "--stack", stack, "--profile", str(profile), "--replicas", "2", "--pairs", "2",
            "--results-dir", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports")]
    for o in (*ENGINE, *opts):
        args += ["--opt", o]
    assert main(args) == 0
    (run,) = list((tmp_path / "results").iterdir())
    return CompareSummary.model_validate_json((run / "compare.json").read_text())


# known truth, its asserted verdicts' computed chance (tests/analysis/test_known_truth_power.py, 2026-12-07): 4,000 of
# 4,000 at this host's measured noise, and at 2x it
def test_cache_aware_routing_recovers_the_configured_prefix_gain(tmp_path, write_profile):
    s = _compare(tmp_path, _profile(write_profile), "sim-proxy", "route=cache_aware")
    (lv,) = s.levels
    base, stack = lv.baseline_routing, lv.stack_routing
    assert base is not None and stack is not None
    assert base.replicas == stack.replicas == 2
    assert stack.hit_rate > 0.95, stack  # every group stays where it went first: cached after its first request
    assert 0.25 < base.hit_rate < 0.75, base  # four groups an engine, two cached: LRU over a random order, ~1/2
    # the baseline's p95 is a miss, the stack's a hit: TTFT p95's change recovers the configured cut, a log ratio of
    # (60 - 40) / 60, within 0.15 (the proxy's hop is a millisecond of a 20 ms hit; on an idle host two pairs' interval
    # is that tight, on a busy one the miss stretches: 61 -> 21 ms idle, 91 -> 28 ms beside real vLLM compares)
    ttft = lv.endpoints["ttft_p95"]
    assert abs(ttft.estimate - math.log((TTFT_MS - SAVES_MS) / TTFT_MS)) < 0.15 and ttft.verdict != "overhead", ttft
    assert lv.stack_ttft_p95_ms < lv.baseline_ttft_p95_ms - SAVES_MS / 2, lv  # and it is a cut, not noise
    assert all(r.requests and sum(r.requests) >= 2 * 48 for r in (base, stack))  # both engines served, both pairs
    assert base.imbalance is not None and base.imbalance < 1.1  # an in-turn spread is even
    # the split, in mean TTFT: inside the engines each hit the placement added saves 40 ms (the reference engine
    # counts a request's first block, so its hit rate is the share of requests hit: about half the requests more,
    # some -20 ms); outside them the proxy's hop, a millisecond or so; the two make the change the client saw
    inside, hop, net = gain_and_hop(next(r for r in split(s.runs) if r.level == lv.level))
    expect = -SAVES_MS * (stack.hit_rate - base.hit_rate)
    assert abs(inside - expect) < SAVES_MS / 4 and inside < -SAVES_MS / 4, (inside, expect)
    assert -2 < hop < 10 and abs(inside + hop - net) < 1.0, (inside, hop, net)
    md = next((tmp_path / "reports").iterdir()).joinpath("report.md").read_text()
    first = md.split("## ")[0]  # the first screen says what routing did, and splits it
    assert "routing over 2 engines" in first and re.search(r"prefix-cache hits \d+% → (9\d|100)%", first), first
    assert re.search(r"= -\d+\.\d ms inside the engines .* and [+-]\d+\.\d ms outside them \(the hop\)", first), first
    assert "## Where the requests went" in md
    report = next((tmp_path / "reports").iterdir())
    assert (report / "prefix_hits.png").stat().st_size > 0 and (report / "engine_load.png").stat().st_size > 0


# known truth, its asserted verdicts' computed chance (tests/analysis/test_known_truth_power.py, 2026-12-07): 4,000 of
# 4,000 at this host's measured noise; 99.9% at 1.5x it, 99.8% at 2x
def test_round_robin_routing_gains_nothing(tmp_path, write_profile):
    s = _compare(tmp_path, _profile(write_profile), "sim-proxy", "route=round_robin")
    (lv,) = s.levels
    assert abs(lv.stack_routing.hit_rate - lv.baseline_routing.hit_rate) < 0.2, (lv.stack_routing, lv.baseline_routing)
    ttft = lv.endpoints["ttft_p95"]
    # no gain: at most the proxy's hop, a millisecond or two on a 60 ms p95 (an overhead where the pairs agree)
    assert ttft.verdict != "gain" and ttft.hi > 0.0, ttft
    assert lv.baseline_ttft_p95_ms - lv.stack_ttft_p95_ms < SAVES_MS / 2, lv


# known truth, its asserted verdicts' computed chance (tests/analysis/test_known_truth_power.py, 2026-12-07): 4,000 of
# 4,000 at this host's measured noise, and at 2x it
def test_an_aa_of_two_bare_engines_calls_nothing(tmp_path, write_profile):
    s = _compare(tmp_path, _profile(write_profile), "sim")
    (lv,) = s.levels
    # the same engines read the same: every endpoint's estimate within 10% of none, and a difference called, if any,
    # lies inside the 5% equivalence margin. The test behind a call rejects "no effect" at 5% by design, so an A/A
    # of two pairs that agree closely calls one now and then: CI saw throughput -0.8% (-1.5…-0.1%) called overhead
    # with both cores busy. Asserting no call at all would fail by the method's own false-positive rate.
    for name, v in lv.endpoints.items():
        assert abs(math.exp(v.estimate) - 1.0) < 0.10, (name, v)
        if v.verdict in ("overhead", "gain") and v.lo is not None and v.hi is not None:
            inside = (math.exp(v.lo) - 1, math.exp(v.hi) - 1) if name != "goodput" else (v.lo, v.hi)
            assert -0.05 < inside[0] and inside[1] < 0.05, (name, v)
    assert lv.stack_routing.replicas == lv.baseline_routing.replicas == 2
    assert s.versions == {"baseline": "sim-0.32.0", "stack": "sim-0.32.0"}


def test_imbalance_is_read_from_each_engine_when_one_is_slowed(tmp_path):
    from harness.analysis.replicas import imbalance
    from harness.load import eventloop
    from harness.load.prompts import PromptGenerator
    from harness.load.protocols import CLIENTS
    from harness.load.runner import LevelPlan, Sender, run_level
    from harness.load.scraper import Scraper
    from harness.load.spread import client_for
    from harness.profile.schema import EngineSettings
    from stacks.base import DeploySettings
    from stacks.base.replicas import ReplicaSet
    from stacks.sim import SimStack

    settings = DeploySettings(engine=EngineSettings(replicas=2), log_dir=tmp_path,
                              options={"ttft_ms": 20, "itl_ms": 5})
    with ReplicaSet(settings, SimStack) as engines:
        engines.deploy()
        engines.wait_ready(30)
        httpx.post(f"{engines.replicas[1].endpoint().base_url}/sim/faults", json={"slowdown": 3}).raise_for_status()
        ep = engines.endpoint()
        client = client_for(CLIENTS, (ep.base_url, ep.model, ep.protocol), (ep.spread, ep.spread_by), max_tokens=16)
        scraper = Scraper(engines.metric_endpoints(), 1.0, tmp_path / "scrapes.jsonl", policy="boundary")
        gen = PromptGenerator("slowed", "", 64)
        scraper.mark(4, "start")
        run = eventloop.run(run_level(Sender(client, gen), LevelPlan(concurrency=4, requests=80)))
        scraper.mark(4, "end")
        server = summarise(scraper.new_scrapes())
        scraper.stop()
    assert all(r["ok"] for r in run.records) and {r["replica"] for r in run.records} == {0, 1}
    loads = server.replicas
    assert [r.replica for r in loads] == ["api@0", "api@1"]
    assert imbalance([r.requests for r in loads]) == pytest.approx(1.0, abs=0.05)  # in turn: even requests
    # the slowed engine holds each request 3x as long: 3 of the 4 in flight, max/mean 3 / 2
    assert imbalance([r.in_engine for r in loads]) == pytest.approx(1.5, abs=0.15), loads
    assert server.generation_tokens == pytest.approx(sum(r.output_tokens for r in loads))  # summed as one engine
    assert server.generation_tokens >= 80 * 16
