"""Stationarity and bimodal TTFT on synthetic windows whose truth is known."""

from __future__ import annotations

import numpy as np

from harness.analysis.steady import stationarity, ttft_modes
from harness.load.client import RequestRecord


def window(ttfts: list[float], gap_ms: float = 100.0, tokens: int = 16, itl_ms: float = 5.0) -> list[RequestRecord]:
    """A closed loop at c=1: each request starts when the previous one ends."""
    out, t = [], 0
    for i, ttft in enumerate(ttfts):
        ev = [ttft + k * itl_ms for k in range(tokens)]
        e2e = ev[-1] + 1
        out.append(RequestRecord(level=1, index=i, ok=True, t_start_ns=t, t_end_ns=t + int(e2e * 1e6), ttft_ms=ttft,
                                 e2e_ms=e2e, event_ms=ev, output_tokens=tokens))
        t += int((e2e + gap_ms) * 1e6)
    return out


def test_a_steady_window_is_steady():
    rng = np.random.default_rng(1)
    s = stationarity(window(list(20 + rng.normal(0, 1, 60))))
    assert s.steady is True and not s.reasons and len(s.blocks_tok_s) == 8


def test_a_change_of_state_is_flagged_with_numbers():
    rng = np.random.default_rng(2)
    s = stationarity(window(list(20 + rng.normal(0, 1, 30)) + list(60 + rng.normal(0, 1, 30))))
    assert s.steady is False
    assert any(r.startswith("TTFT p50") for r in s.reasons), s.reasons
    assert s.ttft_p50_halves[1] > 2 * s.ttft_p50_halves[0]


def test_too_few_requests_cannot_be_judged():
    assert stationarity(window([20.0] * 12)).steady is None


def test_bimodal_ttft_in_streaks_is_shown():
    ttfts = ([18.0] * 10 + [150.0] * 10) * 3
    m = ttft_modes(window(ttfts))
    assert m is not None
    assert m.slow_share == 0.5 and m.streaks == 3 and m.mean_streak == 10 and m.longest_streak == 10
    assert m.independent_streak == 2.0 and 18 < m.threshold_ms < 150
    assert "50% slow" in m.text()


def test_one_mode_with_a_tail_is_not_bimodal():
    rng = np.random.default_rng(3)
    assert ttft_modes(window(list(rng.lognormal(np.log(20), 0.3, 80)))) is None


def test_unsteady_ttft_from_streaks_is_explained():
    from harness.analysis.steady import likely_cause

    rng = np.random.default_rng(4)
    ttfts = [18.0] * 30 + [150.0] * 24 + [18.0] * 6  # the slow streak fills most of the second half
    recs = window(list(np.asarray(ttfts) + rng.normal(0, 1, len(ttfts))))
    st, modes = stationarity(recs), ttft_modes(recs)
    assert modes is not None
    assert likely_cause(st, modes, client_starved=False).startswith("TTFT is bimodal")
    assert likely_cause(stationarity(window([20.0] * 30 + [60.0] * 30)), None, False) == "unexplained"


def test_a_window_that_opens_with_a_synchronized_wave_is_called_a_ramp():
    from harness.analysis.steady import likely_cause

    recs = window([20.0 + 0.1 * i for i in range(60)])
    for r in recs:
        r.level = 4
    for r in recs[:4]:  # the first wave queues its prefills together
        r.ttft_ms = 200.0
    st = stationarity(recs)
    st.reasons = ["TTFT p50 40.0 -> 20.0 ms"]
    st.ttft_p50_halves = (40.0, 20.0)
    assert st.first_wave_ttft_p50_ms == 200.0 and st.rest_ttft_p50_ms < 30
    assert likely_cause(st, None, False).startswith("ramp-up")
    st.ttft_p50_halves = (20.0, 40.0)  # got worse, not better: not a ramp
    assert likely_cause(st, None, False) == "unexplained"


def test_a_change_in_the_engines_step_time_is_named():
    from harness.analysis.steady import likely_cause

    slow, fast = window([20.0] * 30, itl_ms=8.0, gap_ms=1.0), window([20.0] * 30, itl_ms=5.0, gap_ms=1.0)
    shift = slow[-1].t_end_ns + 1_000_000
    for r in fast:
        r.t_start_ns += shift
        r.t_end_ns += shift
    st = stationarity(slow + fast)
    assert st.steady is False and st.tpot_p50_halves[0] > 1.5 * st.tpot_p50_halves[1]  # (E2E - TTFT) / (n - 1)
    assert "time per output token changed" in likely_cause(st, None, False)
