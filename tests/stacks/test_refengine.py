"""The harness against the reference engine: it must measure known latencies, recover a known overhead,
count tokens from usage, report injected failures and warn when the client is the bottleneck.
Tolerances are wide enough for a loaded 2-core machine; exact error figures live in `make bench-harness`."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.analysis.stats import level_stats
from harness.load.client import RequestRecord, StreamClient
from harness.load.prompts import PromptGenerator
from harness.load.runner import LevelPlan, Sender, run_level
from harness.profile.schema import SLO
from harness.results import new_run_id
from harness.schemas import LevelStats
from stacks.base import DeploySettings
from stacks.base.procs import port_in_use
from stacks.refengine.metrics import VLLM_0_32_FAMILIES
from stacks.sim import SimProxyStack, SimStack


def deploy(cls, tmp_path: Path, **options):
    stack = cls(DeploySettings(log_dir=tmp_path / "logs", options=options))
    stack.deploy()
    stack.wait_ready(30)
    return stack


def measure(stack, concurrency=4, n=24, max_tokens=16, warmup=1, api="completions") -> tuple[LevelStats, list]:
    ep = stack.endpoint()
    client = StreamClient(ep.base_url, ep.model, api=api, max_tokens=max_tokens, timeout_s=30)
    gen = PromptGenerator(new_run_id("t"), stack.kind, 32)
    run = asyncio.run(run_level(Sender(client, gen), LevelPlan(concurrency, n, warmup_waves=warmup)))
    recs = [RequestRecord.from_json(r) for r in run.records]
    return level_stats(recs, concurrency, SLO()), run


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    stack = deploy(SimStack, tmp_path_factory.mktemp("sim"), ttft_ms=50, itl_ms=10)
    yield stack
    stack.teardown()


def server_truth(stack) -> dict:
    return httpx.get(f"{stack.endpoint().base_url}/sim/stats").json()


def test_measures_known_ttft_itl_e2e(sim):
    httpx.post(f"{sim.endpoint().base_url}/sim/reset")
    s, _ = measure(sim, concurrency=4, n=24, max_tokens=16)
    truth = server_truth(sim)
    assert s.failed == 0 and s.sent == 24
    # against what the server actually did (same monotonic clock): only client + loopback remain
    assert 0 <= s.ttft_ms.p50 - truth["ttft"]["p50_ms"] < 5
    assert abs(s.itl_ms.p50 - truth["itl"]["p50_ms"]) < 2
    assert 0 <= s.e2e_ms.p50 - truth["e2e"]["p50_ms"] < 5
    # and against the configured timing (50 ms + 15 x 10 ms), with room for a loaded machine's lateness
    assert 50 <= s.ttft_ms.p50 < 65 and 9 < s.itl_ms.p50 < 12 and 200 <= s.e2e_ms.p50 < 230
    assert s.tpot_ms.p50 == pytest.approx(10, abs=1.5)


def test_tokens_come_from_usage_when_chunks_carry_several(tmp_path):
    with deploy(SimStack, tmp_path, ttft_ms=5, itl_ms=2, tokens_per_chunk=4) as stack:
        s, run = measure(stack, concurrency=2, n=8, max_tokens=18)
    assert all(r["output_tokens"] == 18 and len(r["event_ms"]) == 5 for r in run.records)  # 4+4+4+4+2
    assert s.output_tokens == 8 * 18
    assert s.tokens_per_chunk == pytest.approx(18 / 5)


def test_chat_role_chunk_is_not_ttft(sim):
    s, run = measure(sim, concurrency=2, n=6, max_tokens=4, api="chat")
    assert s.failed == 0 and s.ttft_ms.p50 >= 50  # the role chunk is sent at admission, 50 ms earlier


@pytest.mark.slow  # seconds of real load; `make test` runs it, `make test-fast` stays under 2 min
@pytest.mark.alone
def test_known_overhead_proxy_is_reported(tmp_path, sim):
    base, _ = measure(sim, concurrency=4, n=24, max_tokens=16)
    with deploy(SimProxyStack, tmp_path, ttft_ms=50, itl_ms=10, request_delay_ms=20, chunk_delay_ms=3) as proxy:
        layer, _ = measure(proxy, concurrency=4, n=24, max_tokens=16)
        held = httpx.get(f"{proxy.endpoint().base_url}/proxy/stats").json()
    executed = held["request_hold"]["p50_ms"] + held["event_hold"]["p50_ms"]
    assert executed >= 23  # +20 ms per request, +3 ms per chunk (pipelined): TTFT and E2E +23 ms
    # reported overhead: at least what the proxy executed (less a little noise), plus its hop and the drift
    # between two deployments on a loaded 2-core host; the exact resolution is measured by bench-harness
    for delta in (layer.ttft_ms.p50 - base.ttft_ms.p50, layer.e2e_ms.p50 - base.e2e_ms.p50):
        assert executed - 2 <= delta <= executed + 8, (delta, executed)
    assert layer.itl_ms.p50 == pytest.approx(base.itl_ms.p50, abs=2)  # a per-chunk delay does not pile up


def test_rechunking_proxy_changes_tokens_per_chunk_not_tokens(tmp_path):
    with deploy(SimProxyStack, tmp_path, ttft_ms=5, itl_ms=2, rechunk=4) as proxy:
        s, _ = measure(proxy, concurrency=2, n=6, max_tokens=16)
    assert s.failed == 0 and s.output_tokens == 6 * 16 and s.tokens_per_chunk >= 3.5


def test_injected_failures_count_against_goodput(tmp_path):
    with deploy(SimStack, tmp_path, ttft_ms=5, itl_ms=1, fail_500=0.2, fail_429=0.1, cut_stream=0.25, seed=3) as st:
        s, run = measure(st, concurrency=4, n=80, max_tokens=8, warmup=0)
    assert s.sent == 80  # nothing silently dropped
    assert {"http_500", "http_429", "disconnect"} <= set(s.errors)
    assert s.failed == sum(s.errors.values()) and s.failed >= 20
    assert s.goodput == pytest.approx((80 - s.failed) / 80)  # the slow-free sim: every success is good


def test_slow_metrics_is_a_gap_not_a_stall(tmp_path):
    from harness.load.scraper import scrape_once

    with deploy(SimStack, tmp_path, metrics_delay_ms=1500) as stack, httpx.Client(timeout=0.5) as c:
        s = scrape_once(c, "api", f"{stack.endpoint().base_url}/metrics")
    assert not s.ok and s.reason == "timeout"


def test_metrics_use_vllm_names_and_follow_state(tmp_path):
    with deploy(SimStack, tmp_path, ttft_ms=200, itl_ms=20, max_num_seqs=2) as stack:
        url = stack.endpoint().base_url
        seen = {}

        def scrape_during_load():
            # sample while 6 requests hold 2 slots: running should be 2 and waiting 4 at some point
            for _ in range(60):
                fams = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}
                for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
                    v = fams[name].samples[0].value
                    seen[name] = max(seen.get(name, 0), v)
                if seen.get("vllm:num_requests_waiting", 0) >= 4:
                    return

        t = threading.Thread(target=scrape_during_load)
        t.start()
        measure(stack, concurrency=6, n=6, max_tokens=4, warmup=0)
        t.join()
        text = httpx.get(f"{url}/metrics").text
    families = {f.name: f.type for f in text_string_to_metric_families(text) if f.name.startswith("vllm:")}
    expected = {(n[: -len("_total")] if t == "counter" else n): t for n, t in VLLM_0_32_FAMILIES.items()}
    assert {k: v for k, v in families.items() if k in expected} == expected
    assert seen["vllm:num_requests_running"] == 2 and seen["vllm:num_requests_waiting"] >= 4
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    hits = sum(s.value for s in fams["vllm:prefix_cache_hits"].samples if s.name.endswith("_total"))
    assert hits == 0  # unique prefixes: the simulated prefix cache never hits


def test_saturated_client_triggers_the_warning(sim):
    stop = threading.Event()

    def hog():  # a busy thread in the client process: holds the GIL, as a slow client would
        while not stop.is_set():
            sum(range(10_000))

    t = threading.Thread(target=hog, daemon=True)
    t.start()
    try:
        _, run = measure(sim, concurrency=8, n=32, max_tokens=8)
    finally:
        stop.set()
        t.join()
    assert run.client.saturated or run.client.starved
    assert any("CPU" in r or "loop lag" in r for r in run.client.reasons), run.client.reasons


def test_teardown_frees_ports_and_processes(tmp_path):
    stack = deploy(SimProxyStack, tmp_path)
    pids = [p.pid for ps in stack.processes().values() for p in ps]
    ports = [stack.engine.engine.port, stack.port]  # the reference engine's, and the proxy's in front of it
    stack.teardown()
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert not any(port_in_use(p) for p in ports)


def test_several_serving_processes_share_one_port_and_stop_together(tmp_path):
    """processes=N: the harness benchmark's engine that the client cannot outrun. Every process serves (the
    kernel spreads connections over them) and none outlives the deployment."""
    stack = SimStack(DeploySettings(log_dir=tmp_path, options={"processes": 3, "ttft_ms": 1, "itl_ms": 0}))
    with stack:
        stack.deploy()
        stack.wait_ready(30)
        procs = [p for ps in stack.processes().values() for p in ps]
        assert len(procs) >= 3
        client = StreamClient(stack.endpoint().base_url, "tiny", max_tokens=2, timeout_s=30)
        sender = Sender(client, PromptGenerator(new_run_id("t"), "t", 16))
        run = asyncio.run(run_level(sender, LevelPlan(24, 240, warmup_waves=0)))
        assert run.sent == 240 and all(r["ok"] for r in run.records)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)
