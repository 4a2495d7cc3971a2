"""Open-loop load against the reference engine: requests leave on their schedule whatever the server does,
latency counts from the scheduled send time (no coordinated omission), and a level the client could not keep
to its schedule is flagged. Tolerances are wide enough for a loaded 2-core machine."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.stats import level_stats
from harness.errors import LayerbenchError
from harness.load.client import RequestRecord, StreamClient
from harness.load.openloop import Pool, RatePlan, drive_open, run_rate_level, schedule
from harness.load.prompts import PromptGenerator
from harness.load.runner import Hooks, LevelPlan, Phase, Sender, run_level
from harness.profile.loading import load_profile
from harness.profile.schema import SLO
from harness.reporting.run_report import health_warnings, level_rows
from harness.results import new_run_id
from harness.schemas import AppliedConfig, ClientHealth, Dist, LevelSummary, RunSummary, ServerLevelMetrics
from stacks.base import DeploySettings
from stacks.sim import SimStack

TTFT_MS = 20.0


def deploy(tmp_path: Path, **options) -> SimStack:
    stack = SimStack(DeploySettings(log_dir=tmp_path / "logs", options=options))
    stack.deploy()
    stack.wait_ready(30)
    return stack


def client_for(stack: SimStack, max_tokens: int = 4) -> Sender:
    ep = stack.endpoint()
    return Sender(StreamClient(ep.base_url, ep.model, max_tokens=max_tokens, timeout_s=30),
                  PromptGenerator(new_run_id("t"), stack.kind, 32))


def records(run) -> list[RequestRecord]:
    return [RequestRecord.from_json(r) for r in run.records]


@pytest.fixture(scope="module")
def fast_sim(tmp_path_factory):
    stack = deploy(tmp_path_factory.mktemp("sim"), ttft_ms=5, itl_ms=1)
    yield stack
    stack.teardown()


@pytest.fixture(scope="module")
def one_seq_sim(tmp_path_factory):
    """Serves one request at a time, ~26 ms each (20 ms TTFT + 3 x 2 ms): about 38 req/s at most."""
    stack = deploy(tmp_path_factory.mktemp("sim1"), ttft_ms=TTFT_MS, itl_ms=2, max_num_seqs=1)
    yield stack
    stack.teardown()


def test_schedule_gaps():
    const = schedule(50.0, 200, "constant")
    assert const[0] == 0 and (np.abs(np.diff(const) - 20_000_000) <= 1).all()
    pois = schedule(50.0, 2000, "poisson", seed="run-a")
    assert pois == schedule(50.0, 2000, "poisson", seed="run-a")  # seeded: the same run replays its arrivals
    assert pois != schedule(50.0, 2000, "poisson", seed="run-b")
    assert pois != schedule(50.0, 2000, "poisson", seed="run-a", repeat=1)
    gaps = np.diff(pois) / 1e9
    assert pois[0] == 0 and (gaps >= 0).all()
    assert np.mean(gaps) == pytest.approx(1 / 50, rel=0.1)  # 2000 exponential gaps: sd of the mean ~2%
    assert np.std(gaps) == pytest.approx(1 / 50, rel=0.15)  # exponential: sd = mean (constant gaps: sd 0)


def test_scheduler_keeps_its_send_times(fast_sim):
    sender = client_for(fast_sim)
    # 20 req/s: a lateness bound of 12.5 ms (a quarter of the gap), room for a loaded host's late wake-ups
    run = asyncio.run(run_rate_level(sender, RatePlan(20.0, 30, arrival="constant", warmup_waves=0)))
    recs = sorted(records(run), key=lambda r: r.index)
    assert run.sent == 30 and len(recs) == 30 and all(r.ok for r in recs)  # every request was sent
    assert run.rate == 20.0 and run.concurrency == 0
    due = [r.t_due_ns for r in recs]
    assert (np.abs(np.diff(due) - 50_000_000) <= 1).all()  # exactly 1/rate apart
    assert all(r.t_task_ns >= r.t_due_ns for r in recs)  # never sent early
    s = level_stats(recs, 0, SLO(), rate=20.0)
    assert s.rate == 20.0 and s.level == 20.0 and s.scheduled_rate == pytest.approx(20.0, rel=1e-6)
    assert s.achieved_rate == pytest.approx(20.0, rel=0.1)
    assert s.off_schedule is None, s.off_schedule

    run = asyncio.run(run_rate_level(sender, RatePlan(50.0, 20, arrival="poisson", seed=7, warmup_waves=0)))
    recs = sorted(records(run), key=lambda r: r.index)
    assert run.sent == 20 and len(recs) == 20 and all(r.ok for r in recs)
    assert [r.t_due_ns - recs[0].t_due_ns for r in recs] == schedule(50.0, 20, "poisson", 7)


def test_stopped_levels_record_every_request_sent(fast_sim):
    """A dead deployment stops the schedule (runner.watch), Ctrl-C cancels it; either way each request that
    was sent is recorded once, those in flight marked, and nothing is sent after."""
    sender = client_for(fast_sim)
    seen: list[RequestRecord] = []
    dying = Sender(sender.client, sender.gen, dead=lambda: "sim exited" if len(seen) >= 5 else None)
    run = asyncio.run(run_rate_level(dying, RatePlan(50.0, 200, arrival="constant", warmup_waves=0),
                                     Hooks(on_record=seen.append)))
    assert run.aborted == "deployment died: sim exited"
    assert 5 <= run.sent < 200 and len(run.records) == run.sent == len(seen)

    sender = client_for(fast_sim, max_tokens=60)  # ~65 ms requests at 500 req/s: dozens in flight

    async def interrupted() -> list[RequestRecord]:
        got: list[RequestRecord] = []
        pool = Pool(sender.client)
        task = asyncio.create_task(drive_open(sender, Phase(500.0, 0, "measure"), schedule(500.0, 5000, "constant"),
                                              pool, got.append))
        while len(got) < 20:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        pool.close()
        return got

    got = asyncio.run(interrupted())
    assert sorted(r.index for r in got) == list(range(len(got))) and len(got) < 5000  # sent = recorded
    assert any(r.error == "interrupted" for r in got)


def test_latency_counts_from_the_schedule():
    """TTFT and E2E of an open-loop level add the time between the scheduled send and the request going out;
    ITL and TPOT are gaps and stay."""
    recs = []
    for i in range(30):
        t_due = i * 10_000_000
        recs.append(RequestRecord(level=100.0, index=i, ok=True, t_due_ns=t_due, t_task_ns=t_due + 100_000,  # type: ignore[arg-type]
                                  t_start_ns=t_due + 30_000_000, t_end_ns=t_due + 70_000_000, ttft_ms=10.0,
                                  e2e_ms=40.0, event_ms=[10.0, 20.0, 30.0, 40.0], output_tokens=4))
    closed = level_stats(recs, 1, SLO())
    opened = level_stats(recs, 0, SLO(ttft_s=0.025), rate=100.0)
    assert closed.ttft_ms.p50 == pytest.approx(10.0) and opened.ttft_ms.p50 == pytest.approx(40.0)
    assert opened.e2e_ms.p50 == pytest.approx(70.0) and opened.itl_ms.p50 == pytest.approx(10.0)
    assert opened.tpot_ms.p50 == pytest.approx(closed.tpot_ms.p50)
    assert opened.goodput == 0.0  # 40 ms from schedule misses a 25 ms TTFT bound that 10 ms would meet
    assert opened.dispatch_delay_ms.p50 == pytest.approx(0.1)  # the client's own lateness, apart


def test_coordinated_omission_shows_the_queue(one_seq_sim):
    sender = client_for(one_seq_sim)
    closed = asyncio.run(run_level(sender, LevelPlan(1, 20, warmup_waves=0)))
    c1 = level_stats(records(closed), 1, SLO())
    assert c1.failed == 0 and c1.ttft_ms.p50 < 2 * TTFT_MS  # a closed loop waits: it sees the bare TTFT
    # 120 req/s offered to a server of ~38 req/s: the queue grows by ~80 requests a second
    run = asyncio.run(run_rate_level(sender, RatePlan(120.0, 40, arrival="constant", warmup_waves=0)))
    s = level_stats(records(run), 0, SLO(), rate=120.0)
    assert s.failed == 0 and s.sent == 40
    assert s.ttft_ms.p95 > 5 * TTFT_MS, s.ttft_ms
    assert s.e2e_ms.p95 > 5 * TTFT_MS and s.e2e_ms.p95 > c1.e2e_ms.p95 * 5


def test_a_client_side_queue_counts_from_the_schedule(one_seq_sim):
    """One connection for 120 req/s: requests wait in the client, not the server. From the request going out
    the TTFT is the bare one; from the schedule it holds the wait."""
    sender = client_for(one_seq_sim)

    async def go():
        pool = Pool(sender.client, limit=1)
        try:
            return await drive_open(sender, Phase(120.0, 0, "measure"), schedule(120.0, 30, "constant"), pool,
                                    lambda r: None)
        finally:
            pool.close()

    recs = asyncio.run(go()).records
    assert len(recs) == 30 and all(r.ok for r in recs)
    assert np.percentile([r.ttft_ms for r in recs], 95) < 3 * TTFT_MS  # as sent: no server queue
    assert level_stats(recs, 0, SLO(), rate=120.0).ttft_ms.p95 > 5 * TTFT_MS  # from schedule: the wait


def test_unsustainable_rate_is_flagged(fast_sim):
    sender = client_for(fast_sim, max_tokens=2)
    run = asyncio.run(run_rate_level(sender, RatePlan(20000.0, 300, seed=1, warmup_waves=0)))
    recs = records(run)
    assert run.sent == 300 and len(recs) == 300  # every scheduled request was sent, late
    s = level_stats(recs, 0, SLO(), rate=20000.0)
    assert s.achieved_rate < 0.95 * s.scheduled_rate, (s.achieved_rate, s.scheduled_rate)
    assert s.off_schedule and "could not keep to the schedule" in s.off_schedule
    assert "req/s against a schedule of" in s.off_schedule or "after their scheduled time" in s.off_schedule
    summary = RunSummary(run_id="r", label="sim", stack="sim", engine_version="x", applied=AppliedConfig(),
                         profile="p")
    summary.add(LevelSummary(stats=s, client=run.client, process_cpu_s={}, window_s=run.window_s,
                             server=ServerLevelMetrics()))
    assert summary.off_schedule_levels == [20000.0] and summary.open_loop
    assert any("could not keep to the arrival schedule at 20000 req/s" in w for w in health_warnings(summary))
    assert "OFF SCHEDULE" in level_rows(summary)[0][-1]


def test_closed_loop_levels_are_keyed_by_concurrency():
    stats = level_stats([], 4, SLO())
    assert stats.rate is None and stats.level == 4 and stats.level_text == "c=4"
    summary = RunSummary(run_id="r", label="sim", stack="sim", engine_version="x", applied=AppliedConfig(),
                         profile="p")
    health = ClientHealth(cpu_pct=95.0, loop_lag_ms=Dist(), dispatch_delay_ms=Dist(), saturated=True)
    summary.add(LevelSummary(stats=stats, client=health, process_cpu_s={}, window_s=1.0,
                             server=ServerLevelMetrics()))
    assert not summary.open_loop and summary.client_saturated_levels == [4] and not summary.off_schedule_levels
    assert "saturated at c=[4]" in health_warnings(summary)[0]


def test_open_loop_profiles(write_profile):
    p = load_profile("quick-rates")
    assert p.open_loop and p.levels() == [2.0, 8.0, 32.0] and p.arrival == "poisson"
    assert p.requests_for(32.0) == 96 and p.requests_for(2.0) == p.requests  # rate x min_duration_s, >= requests
    one = p.with_levels([3.5])
    assert one.levels() == [3.5] and one.open_loop and one.requests_for(3.5) == max(30, math.ceil(3.5 * 3))
    q = load_profile("quick")
    assert not q.open_loop and q.levels() == [1, 2, 16] and q.with_levels([12]).levels() == [12]
    with pytest.raises(LayerbenchError, match="concurrency"):
        q.with_levels([3.5])
    with pytest.raises(LayerbenchError, match="positive"):
        p.with_levels([0.0])
    custom = load_profile(str(write_profile(rates=[5, 1.5, 5], arrival="constant", seed=3, requests=20)))
    assert custom.levels() == [1.5, 5.0] and custom.arrival == "constant" and custom.seed == 3


@pytest.mark.parametrize(("fields", "match"), [
    ({"rates": [2, -1]}, r"field 'rates'.*positive"),
    ({"rates": [0]}, r"field 'rates'.*positive"),
    ({"rates": []}, r"field 'rates'.*positive"),
    ({"rates": ["fast"]}, r"field 'rates\.0'"),
    ({"rates": [2], "arrival": "uniform"}, r"field 'arrival'.*'poisson' or 'constant'"),
    ({"rates": [2], "concurrency": [1]}, r"either `concurrency`.*or `rates`"),
    ({"arrival": "constant"}, r"`arrival` applies to open-loop profiles only"),
    ({"rates": [2], "requests": 12}, r"levels \[2\.0\].*`requests` or `min_duration_s`"),
])
def test_malformed_open_loop_profiles_are_refused(write_profile, fields, match):
    with pytest.raises(LayerbenchError, match=match):
        load_profile(str(write_profile(**fields)))


@pytest.mark.slow  # two sim-proxy deployments, a warmup sweep and two rates each (~15 s)
@pytest.mark.alone
def test_open_loop_compare_reports_rates(tmp_path, write_profile):
    from harness.cli.main import main
    from harness.measure.resume import ResumePlan
    from harness.schemas import CompareSummary

    profile = write_profile(rates=[20, 60], arrival="constant", requests=20, output_tokens=8, input_tokens=32,
                            scrape_interval_s=0.5, warmup_sweep=True)
    args = ["compare", "--stack", "sim-proxy", "--profile", str(profile), "--repeats", "1", "--pairs", "1",
            "--results-dir", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports"),
            "--opt", "ttft_ms=20", "--opt", "itl_ms=5", "--opt", "request_delay_ms=40"]
    assert main(args) == 0
    run = next((tmp_path / "results").iterdir())
    s = CompareSummary.model_validate_json((run / "compare.json").read_text())
    assert s.status == "complete" and s.open_loop
    assert [lv.rate for lv in s.levels] == [20.0, 60.0] and all(lv.concurrency == 0 for lv in s.levels)
    for lv in s.levels:  # the proxy's 40 ms shows in latency from schedule
        assert lv.stack_ttft_p95_ms - lv.baseline_ttft_p95_ms > 20, lv
        assert lv.baseline_e2e_p95_ms and lv.stack_e2e_p95_ms and lv.stack_achieved_rate
    for side in s.runs.values():
        assert [lv.stats.rate for lv in side.levels] == [20.0, 60.0]
    report = tmp_path / "reports" / run.name
    md = (report / "report.md").read_text()
    assert "| rate (req/s) |" in md and "| 60 |" in md and "![latency_vs_rate.png](latency_vs_rate.png)" in md
    assert (report / "latency_vs_rate.png").stat().st_size > 0
    loaded = load_profile(str(profile))
    plan = ResumePlan(run_id=run.name, stack="sim-proxy", profile=loaded, options={}, repeats=1, invocation=1,
                      prior=s.runs, history=[])
    assert plan.side_done("stack")  # resume matches levels by rate
    assert not plan.model_copy(update={"profile": loaded.with_levels([20, 60, 100])}).side_done("stack")
