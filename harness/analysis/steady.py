"""What a level's own window says about itself: was it the engine's steady state, and is its TTFT one
distribution or two?

- Stationarity: the window's full-load part (first start to last start: every slot busy; the tail after the
  last start drains and is left out) is cut into two halves. Output tok/s (each request's usage tokens spread
  over its content events, binned by arrival; halves by time) and TTFT p50 (the first and second half of the
  requests by start order) are compared. A level is *not steady* when a half differs by more than its noise
  (tok/s: 95% interval from BINS time bins; TTFT p50: bootstrap 95% interval of the difference of medians)
  and by more than MIN_REL.
- Bimodal TTFT: on this 2-core host TTFT at low concurrency is 15-20 ms or 120-210 ms with nothing in
  between, the slow ones in streaks of ~10 consecutive requests. Averages hide that; this reports the slow
  share, both modes and the streak length (and what independence would give)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.load.client import RequestRecord
from harness.profile.schema import MIN_HALF
from harness.schemas.window import Modes, Stationarity

BINS = 8
T_95_DF6 = 2.447  # two-sided 95% t quantile for 6 degrees of freedom (BINS - 2)
MIN_REL = 0.05  # differences below 5% are not called a change of state whatever the noise
BOOTSTRAP = 400


def stationarity(records: Sequence[RequestRecord], since_ns: int | None = None) -> Stationarity:
    """since_ns: where the window's steady part opens (stats.steady_window: every slot decoding); the halves are
    of what follows it, so the ramp-up from idle, which every closed-loop window opens with, is not flagged."""
    ok = sorted((r for r in records if r.ok and r.ttft_ms is not None), key=lambda r: r.t_start_ns)
    every = ok  # every request's tokens count in the time bins, those started before since_ns too
    c = ok[0].level if ok else 0
    if c > 1 and len(ok) > 2 * c:
        out_wave = (float(np.median([r.ttft_ms for r in ok[:c]])), float(np.median([r.ttft_ms for r in ok[c:]])))
    else:
        out_wave = (None, None)
    if since_ns is not None and len([r for r in ok if r.t_start_ns >= since_ns]) >= 2 * MIN_HALF:
        ok = [r for r in ok if r.t_start_ns >= since_ns]
    else:
        since_ns = None
    if len(ok) < 2 * MIN_HALF:
        return Stationarity(steady=None, reasons=[f"{len(ok)} successful requests: too few to split"])
    t0, t1 = since_ns or ok[0].t_start_ns, ok[-1].t_start_ns
    if t1 <= t0:
        return Stationarity(steady=None, reasons=["all requests started at once: no full-load period to split"])
    # halves by start order: a closed loop starts its requests in waves, so halves by time can be lopsided
    tpots = [(r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1) for r in ok
             if r.e2e_ms is not None and r.output_tokens and r.output_tokens > 1]
    tpot_halves = ((float(np.median(tpots[: len(tpots) // 2])), float(np.median(tpots[len(tpots) // 2:])))
                   if len(tpots) == len(ok) else None)
    first = [r.ttft_ms for r in ok[: len(ok) // 2]]
    second = [r.ttft_ms for r in ok[len(ok) // 2:]]
    out = Stationarity(steady=True, first_wave_ttft_p50_ms=out_wave[0], rest_ttft_p50_ms=out_wave[1],
                       tpot_p50_halves=tpot_halves)
    # tok/s by time bin over the full-load period
    edges = np.linspace(t0, t1, BINS + 1)
    tokens = np.zeros(BINS)
    for r in every:
        if not r.output_tokens or not r.event_ms:
            continue
        at = r.t_start_ns + np.asarray(r.event_ms) * 1e6
        idx = np.searchsorted(edges, at, side="right") - 1
        inside = (idx >= 0) & (idx < BINS)
        np.add.at(tokens, idx[inside], r.output_tokens / len(r.event_ms))
    rates = tokens / ((t1 - t0) / BINS / 1e9)
    h1, h2 = rates[: BINS // 2], rates[BINS // 2:]
    se = float(np.sqrt(h1.var(ddof=1) / len(h1) + h2.var(ddof=1) / len(h2)))
    out.tok_s_halves, out.tok_s_noise = (float(h1.mean()), float(h2.mean())), T_95_DF6 * se
    out.blocks_tok_s = [round(float(x), 2) for x in rates]
    diff, mean = float(h2.mean() - h1.mean()), float(rates.mean())
    if mean > 0 and abs(diff) > out.tok_s_noise and abs(diff) > MIN_REL * mean:
        out.steady = False
        out.reasons.append(f"tok/s {h1.mean():.0f} -> {h2.mean():.0f} ({100 * diff / mean:+.0f}%, "
                           f"noise ±{100 * out.tok_s_noise / mean:.0f}%)")
    # TTFT p50 by start time, bootstrap interval of the difference of medians
    a, b = np.asarray(first), np.asarray(second)
    rng = np.random.default_rng(0)
    boot = (np.median(rng.choice(b, (BOOTSTRAP, b.size)), axis=1)
            - np.median(rng.choice(a, (BOOTSTRAP, a.size)), axis=1))
    lo, hi = np.percentile(boot, [2.5, 97.5])
    d = float(np.median(b) - np.median(a))
    out.ttft_p50_halves, out.ttft_noise_ms = (float(np.median(a)), float(np.median(b))), float(hi - lo) / 2
    overall = float(np.median(np.concatenate([a, b])))
    if (lo > 0 or hi < 0) and abs(d) > MIN_REL * overall:
        out.steady = False
        out.reasons.append(f"TTFT p50 {np.median(a):.1f} -> {np.median(b):.1f} ms (95% interval of the "
                           f"change {lo:+.1f}…{hi:+.1f} ms)")
    return out


def ttft_modes(records: Sequence[RequestRecord], min_share: float = 0.05, min_ratio: float = 2.0,
               min_separation: float = 2.0) -> Modes | None:
    """Two modes of log(TTFT) split where the between-class variance is largest (Otsu). Called bimodal only
    when each mode holds >= min_share of requests (and >= 3), the slow mode's median is >= min_ratio x the
    fast one's, and Ashman's D on log TTFT >= min_separation (two well separated humps, not one long tail)."""
    ok = sorted((r for r in records if r.ok and r.ttft_ms), key=lambda r: r.t_start_ns)
    if len(ok) < 2 * MIN_HALF:
        return None
    x = np.log(np.asarray([r.ttft_ms for r in ok]))
    s = np.sort(x)
    best, split = -1.0, None
    for i in range(1, s.size):
        lo, hi = s[:i], s[i:]
        between = lo.size * hi.size * (hi.mean() - lo.mean()) ** 2
        if between > best:
            best, split = between, (s[i - 1] + s[i]) / 2
    slow = x > split
    n_slow = int(slow.sum())
    if min(n_slow, x.size - n_slow) < max(3, min_share * x.size):
        return None
    fast_v, slow_v = x[~slow], x[slow]
    d = np.sqrt(2) * abs(slow_v.mean() - fast_v.mean()) / np.sqrt(fast_v.var() + slow_v.var() + 1e-12)
    fast_p50, slow_p50 = float(np.exp(np.median(fast_v))), float(np.exp(np.median(slow_v)))
    if slow_p50 < min_ratio * fast_p50 or d < min_separation:
        return None
    runs, cur = [], 0
    for flag in slow:
        if flag:
            cur += 1
        elif cur:
            runs.append(cur)
            cur = 0
    if cur:
        runs.append(cur)
    share = n_slow / x.size
    return Modes(slow_share=share, threshold_ms=float(np.exp(split)), fast_p50_ms=fast_p50, slow_p50_ms=slow_p50,
                 streaks=len(runs), mean_streak=float(np.mean(runs)), longest_streak=max(runs),
                 independent_streak=1.0 / (1.0 - share) if share < 1 else float("inf"))


def _improved(st: Stationarity, what: str, sign: int) -> bool:
    """The flagged figure got better in the second half (tok/s up: sign +1; TTFT down: sign -1)."""
    halves = st.tok_s_halves if what == "tok/s" else st.ttft_p50_halves
    return (halves is not None and any(r.startswith(what) for r in st.reasons)
            and sign * (halves[1] - halves[0]) > 0)


def likely_cause(st: Stationarity, modes: Modes | None, client_starved: bool) -> str:
    """What the level's own data says about why it was not steady ("unexplained" when nothing does)."""
    causes = []
    if (st.first_wave_ttft_p50_ms and st.rest_ttft_p50_ms and st.first_wave_ttft_p50_ms > 1.1 * st.rest_ttft_p50_ms
            and (_improved(st, "tok/s", +1) or _improved(st, "TTFT", -1))):
        causes.append(f"ramp-up: the window opens from idle (the warmup wave drains first), so its first c requests "
                      f"start together and queue their prefills (TTFT p50 {st.first_wave_ttft_p50_ms:.0f} ms vs "
                      f"{st.rest_ttft_p50_ms:.0f} ms after them); the first half holds that transient")
    if st.tpot_p50_halves and st.tok_s_halves and any(r.startswith("tok/s") for r in st.reasons):
        (t1, t2), (r1, r2) = st.tpot_p50_halves, st.tok_s_halves
        if abs(t2 - t1) > 0.1 * t1 and (t2 < t1) == (r2 > r1):
            causes.append(f"the engine's own time per output token changed at the same load (TPOT p50 {t1:.1f} -> "
                          f"{t2:.1f} ms): the host's state (CPU contention or clock on this shared VM), not load")
    if (any(r.startswith("TTFT") for r in st.reasons) and modes is not None
            and modes.mean_streak > 1.5 * modes.independent_streak):
        causes.append("TTFT is bimodal with slow requests in streaks, and the streaks fell unevenly between the "
                      "halves (a host scheduling state that persists for several requests, not load drift)")
    if client_starved:
        causes.append("the client was starved of CPU by the deployment in this window")
    return "; ".join(causes) or "unexplained"
