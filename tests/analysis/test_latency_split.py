"""Where the latency went: the engine's own mean TTFT/E2E from its histograms' _sum/_count deltas between a
window's edge scrapes, under its own names or a declared renaming, set against the client's."""

from __future__ import annotations

import pytest

from harness.analysis.latency_split import COUNT_TOLERANCE, hidden, side_split
from harness.analysis.server_metrics import engine_latency, summarise
from harness.schemas import Dist, LevelStats, LevelSummary


def scrape(phase: str | None, ttft: tuple[float, float], e2e: tuple[float, float], prefix: str = "vllm:") -> dict:
    """ttft / e2e: (sum in seconds, count) as the histogram has them at this scrape."""
    lab = "{engine=0,model_name=m}"
    return {"ok": True, "phase": phase, "level": 4, "samples": {
        f"{prefix}time_to_first_token_seconds_sum{lab}": ttft[0],
        f"{prefix}time_to_first_token_seconds_count{lab}": ttft[1],
        f"{prefix}e2e_request_latency_seconds_sum{lab}": e2e[0],
        f"{prefix}e2e_request_latency_seconds_count{lab}": e2e[1],
    }}


def test_engine_latency_is_the_windows_histogram_delta():
    # 10 requests before the window; 20 in it with mean TTFT 50 ms and E2E 400 ms
    window = [scrape("start", (1.0, 10), (3.0, 10)), scrape(None, (1.4, 15), (4.0, 12)),
              scrape("end", (2.0, 30), (11.0, 30))]
    ttft, e2e, n = engine_latency(window)
    assert ttft == pytest.approx(50.0) and e2e == pytest.approx(400.0) and n == 20
    # an interval poll is not an edge: without both edges there is no window
    assert engine_latency(window[:2]) == (None, None, None)
    m = summarise(window)
    assert (m.engine_ttft_ms, m.engine_e2e_ms, m.engine_requests) == (ttft, e2e, n)


def test_renamed_histograms_are_read_only_under_the_declared_prefix():
    window = [scrape("start", (0.0, 0), (0.0, 0), "ray_vllm_"), scrape("end", (1.0, 10), (5.0, 10), "ray_vllm_")]
    assert engine_latency(window) == (None, None, None)  # not guessed
    assert engine_latency(window, ("ray_vllm_",))[0] == pytest.approx(100.0)


def level(ttft_mean: float, e2e_mean: float, ok: int, engine: tuple[float | None, float | None, float | None]
          ) -> LevelSummary:
    stats = LevelStats(concurrency=4, sent=ok, succeeded=ok, failed=0, errors={}, wall_s=1.0, output_tokens=ok,
                       throughput_tok_s=1.0, request_rate=1.0, goodput=1.0, good_rps=1.0,
                       ttft_ms=Dist(n=ok, mean=ttft_mean), itl_ms=Dist(), tpot_ms=Dist(),
                       e2e_ms=Dist(n=ok, mean=e2e_mean),
                       tokens_per_chunk=1.0, dispatch_delay_ms=Dist())
    return _level(stats, engine)


def _level(stats: LevelStats, engine) -> LevelSummary:
    from harness.schemas import ClientHealth, ServerLevelMetrics

    fields = ClientHealth.model_fields
    client = ClientHealth.model_construct(**{k: f.default for k, f in fields.items()})
    server = ServerLevelMetrics(engine_ttft_ms=engine[0], engine_e2e_ms=engine[1], engine_requests=engine[2])
    return LevelSummary.model_construct(stats=stats, client=client, process_cpu_s={}, window_s=1.0, server=server,
                                        incomplete=None)


def test_outside_share_is_client_minus_engine_and_a_lagging_count_is_flagged():
    side = side_split([level(100, 500, 40, (60, 450, 40)), level(120, 520, 40, (70, 470, 41))])
    assert side.outside_ttft_ms == pytest.approx(45.0) and side.outside_e2e_ms == pytest.approx(50.0)
    assert not side.count_off
    # a window whose histograms counted other requests (a lagging exporter) is left out of the engine's mean
    off = 40 * (1 + 2 * COUNT_TOLERANCE)
    lagging = side_split([level(100, 500, 40, (60, 450, 40)), level(100, 500, 40, (900, 9000, off))])
    assert lagging.count_off and lagging.engine_ttft_ms == 60 and lagging.engine_e2e_ms == 450
    only_lagging = side_split([level(100, 500, 40, (900, 9000, 91))])
    assert only_lagging.count_off and only_lagging.engine_ttft_ms is None and only_lagging.outside_ttft_ms is None


def test_a_side_without_the_engines_histograms_is_hidden():
    from harness.analysis.latency_split import LevelSplit

    shown = side_split([level(100, 500, 40, (60, 450, 40))])
    dark = side_split([level(150, 600, 40, (None, None, None))])
    rows = [LevelSplit(level=4, baseline=shown, stack=dark)]
    assert hidden(rows, "stack") and not hidden(rows, "baseline")
    assert rows[0].layer_ttft_ms is None  # nothing to subtract: the report says the layer hides it
    both = LevelSplit(level=4, baseline=shown, stack=side_split([level(180, 600, 40, (62, 455, 40))]))
    assert both.layer_ttft_ms == pytest.approx((180 - 62) - (100 - 60))


def test_rerender_windows_run_from_start_to_end_and_skip_polls_between_levels():
    from harness.reporting.rebuild import _windows

    def sc(label: str, phase: str | None, level: int, endpoint: str = "api") -> dict:
        return {"label": label, "phase": phase, "level": level, "endpoint": endpoint}

    scrapes = [sc("baseline", "start", 1), sc("baseline", "start", 1, "engine"), sc("baseline", None, 1),
               sc("stack", "start", 1), sc("baseline", "end", 1), sc("baseline", "end", 1, "engine"),
               sc("baseline", None, 1),  # an interval poll between two levels
               sc("baseline", "start", 4), sc("baseline", "end", 4)]
    windows = _windows(scrapes, "baseline")
    assert [[(w["phase"], w["level"], w["endpoint"]) for w in win] for win in windows] == [
        [("start", 1, "api"), ("start", 1, "engine"), (None, 1, "api"), ("end", 1, "api"), ("end", 1, "engine")],
        [("start", 4, "api"), ("end", 4, "api")]]
