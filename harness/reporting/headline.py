"""A compare's verdicts in words, presentation only: the headline names the worst significant endpoint at the
level where the layer did worst (a goodput collapse or a TTFT blow-up is never hidden behind an inconclusive
throughput), every other endpoint with its verdict or what the run could have detected, and one line lists the
levels by verdict."""

from __future__ import annotations

import math

from harness.analysis.judging import ENDPOINTS
from harness.analysis.verdict import pct
from harness.profile.schema import IDLE_CORES
from harness.reporting.format import fmt, share_pct
from harness.schemas import CompareSummary, LevelDelta, Verdict, levels_text

NAMES = {ep.key: ep.name for ep in ENDPOINTS}


def _badness(lv: LevelDelta, call: str) -> float:
    """How far the level's significant endpoints moved (log ratio, or goodput points)."""
    return max((abs(v.estimate) for v in lv.endpoints.values() if v.verdict == call), default=0.0)


def headline_level(s: CompareSummary) -> LevelDelta | None:
    """The level the headline speaks of: the worst significant overhead, else the largest gain, else the highest
    level with a verdict, else the highest measured one."""
    judged = [lv for lv in s.levels if lv.judged]
    for call in ("overhead", "gain"):  # a mixed level has both
        hits = [lv for lv in judged if any(v.verdict == call for v in lv.endpoints.values())]
        if hits:
            return max(hits, key=lambda lv: (_badness(lv, call), lv.level))
    return judged[-1] if judged else s.top


def figure(key: str, lv: LevelDelta) -> str:
    """The endpoint's effect as both sides' figures: goodput 100% → 18%, TTFT p95 ×2.9 (174 → 505 ms), -12.0%."""
    v = lv.endpoints.get(key)
    if key == "goodput":
        return f"goodput {share_pct(lv.baseline_goodput)} → {share_pct(lv.stack_goodput)}"
    if key == "ttft_p95":
        ratio = math.exp(v.estimate) if v is not None and v.estimate is not None else None
        return (f"TTFT p95 ×{fmt(ratio, '{:.2f}')} ({fmt(lv.baseline_ttft_p95_ms, '{:,.0f}')} → "
                f"{fmt(lv.stack_ttft_p95_ms, '{:,.0f}')} ms)")
    return f"throughput {fmt(lv.delta_pct, '{:+.1f}%')}"


def detectable(key: str, v: Verdict) -> str:
    """The smallest effect the run could have detected, in the endpoint's own terms."""
    if v.mde is None or not math.isfinite(v.mde):
        if v.note and v.se is None:
            return f"no interval: {v.note}"
        return "no interval: fewer than 2 deployment pairs and no A/A of this profile on this host"
    # one degree of freedom at a fifth of the budget detects only what no share or ratio can show as ±N
    if key == "goodput" and v.mde >= 1:
        return "this run could have detected no change in goodput, even 100 points"
    if key != "goodput" and v.mde >= math.log(2):
        return f"this run could have detected only a change past ×{math.exp(v.mde):.3g} and nothing less"
    size = f"±{100 * v.mde:.0f} points" if key == "goodput" else f"±{abs(pct(v.mde)):.0f}%"
    return f"this run could have detected {size} and no less"


def endpoint_text(key: str, lv: LevelDelta, margin: float, short: bool = False,
                  ttft_margin: float | None = None) -> str:
    v = lv.endpoints.get(key)
    if v is None:
        return f"{NAMES[key]}: not judged"
    if v.verdict in ("overhead", "gain"):
        interval = (f" (95% interval {_interval(key, v)})" if not short else "")
        return f"{figure(key, lv)}{interval}"
    if v.verdict == "equivalent":
        within = f"±{100 * margin:.0f} points" if key == "goodput" else f"±{100 * margin:.0f}%"
        if key == "ttft_p95" and ttft_margin:
            within = f"±{100 * ttft_margin:.0f}%"
        return f"{NAMES[key]} equivalent (within {within})"
    why = detectable(key, v)
    return f"{NAMES[key]} inconclusive ({why.removeprefix('this run ').removesuffix(' and no less') if short else why})"


def _interval(key: str, v: Verdict) -> str:
    if key == "goodput":
        return f"{100 * v.lo:+.0f}…{100 * v.hi:+.0f} points"
    return f"{pct(v.lo):+.1f}…{pct(v.hi):+.1f}%"


def verdict_sentence(s: CompareSummary, lv: LevelDelta) -> str:
    """'overhead: goodput 100% → 18%, TTFT p95 ×2.9 (…); throughput inconclusive (could have detected ±61%)'."""
    if not lv.judged:
        return f"{lv.verdict}: {lv.why or 'no verdict'}"
    calls = ("overhead", "gain") if lv.verdict == "mixed" else (lv.verdict,)
    hit = [k for k, v in lv.endpoints.items() if v.verdict in calls and v.verdict in ("overhead", "gain")]
    rest = [k for k in lv.endpoints if k not in hit]
    said = [endpoint_text(k, lv, s.margin, True, s.ttft_margin)
            + (f" {lv.endpoints[k].verdict}" if lv.verdict == "mixed" else "") for k in hit]
    head = f"{lv.verdict}: " + ", ".join(said) if hit else f"{lv.verdict}"
    tail = "; ".join(endpoint_text(k, lv, s.margin, True, s.ttft_margin) for k in rest)
    return head + (f"; {tail}" if tail and hit else f": {tail}" if tail else "")


def by_level(s: CompareSummary) -> str | None:
    """'by level (one error budget: Holm's correction over the 3 judged levels × 3 endpoints; 3 deployment pairs):
    overhead at c=[4, 16] (goodput);
    inconclusive at …'."""
    if not s.levels:
        return None
    groups: dict[str, list[LevelDelta]] = {}
    for lv in s.levels:
        groups.setdefault(lv.verdict, []).append(lv)
    judged = sum(lv.judged for lv in s.levels)
    parts = []
    for call in ("overhead", "gain", "mixed", "equivalent", "inconclusive", "host-bound", "unchecked",
                 "client-bound", "missing"):
        lvs = groups.get(call, [])
        if lvs:
            whys = sorted({lv.why for lv in lvs if lv.why and lv.judged})
            parts.append(f"{call} at {levels_text([lv.level for lv in lvs], s.open_loop)}"
                         + (f" ({'; '.join(whys)})" if whys else ""))
    pairs = max((lv.pairs for lv in s.levels), default=0)
    text = (f"by level (one error budget: Holm's correction over the {judged} judged level{'s' if judged != 1 else ''}"
            f" × 3 endpoints; {pairs} deployment pair{'s' if pairs != 1 else ''}): " + "; ".join(parts))
    return text + (f". {stopping_text(s)}" if s.stopping else "")


def stopping_text(s: CompareSummary) -> str:
    """'Sequential: stopped: every judged level decided after 3 pairs; c=1 took 2 pairs, c=16 3, c=64 3'."""
    st = s.stopping
    assert st is not None
    took = [f"{lv.level_text} {n}" if (n := st.level_pairs(lv.level)) else f"{lv.level_text} undecided"
            for lv in s.levels if lv.judged]
    return (f"Sequential (at most {st.max_pairs} pairs" + (f", {st.budget_s / 60:g} min" if st.budget_s else "")
            + f"): stopped: {st.stopped or 'before its first look'}"
            + (f"; pairs each level took: {', '.join(took)}" if took else ""))


def estimate_text(key: str, lv: LevelDelta) -> str:
    """The endpoint's estimate and 95% interval in its own terms: '-10.8% (-11.6…-9.9%)', '×1.34 (×1.10…×1.62)',
    '-50 pts (-53…-47)'; '—' where it was not judged, 'no interval' where it has none."""
    v = lv.endpoints.get(key)
    if v is None:
        return "—"
    if v.se is None:
        return "no interval"
    est = f"{100 * v.estimate:+.0f} points" if key == "goodput" else (
        f"×{math.exp(v.estimate):.2f}" if key == "ttft_p95" else f"{pct(v.estimate):+.1f}%")
    if key == "ttft_p95":
        return f"{est} (×{math.exp(v.lo):.2f}…×{math.exp(v.hi):.2f})"
    if key == "goodput":
        return f"{100 * v.estimate:+.0f} pts ({100 * v.lo:+.0f}…{100 * v.hi:+.0f})"
    return f"{est} ({_interval(key, v)})"


def _cell(key: str, lv: LevelDelta) -> str:
    v = lv.endpoints.get(key)
    if v is None:
        return "—"
    if v.se is None:
        return f"{v.verdict} (no interval)"
    est = f"{100 * v.estimate:+.0f} points" if key == "goodput" else (
        f"×{math.exp(v.estimate):.2f}" if key == "ttft_p95" else f"{pct(v.estimate):+.1f}%")
    note = "" if v.p_holm is None or v.p is None or not (v.p < 0.05 <= v.p_holm) else \
        ", interval excludes 0 before Holm's correction"
    return f"{v.verdict}: {est} ({_interval(key, v)}{note})"


def _design(s: CompareSummary) -> str:
    if s.deployments != "interleaved":
        return "in counterbalanced order (AB, BA, BA, AB, …)"
    again = sum(r.remeasured for r in s.runs.values())
    busy = sum(1 for r in s.runs.values() for lv in r.levels if (lv.idle_cores or 0) > IDLE_CORES)
    return ("up at once, their windows in a random order at every level (interleaved); "
            + (f"{again} window(s) measured again because the idle side used more than {IDLE_CORES} cores"
               + (f", {busy} kept after the last try with the idle side still busy" if busy else "")
               if again else f"the idle side stayed under {IDLE_CORES} cores in every window"))


def verdict_table(s: CompareSummary):
    """Per level: its verdict and each endpoint's estimate, 95% interval and verdict, and throughput's MDE."""
    caption = ("Each level's verdict is its significant endpoints' (mixed where one is a gain and another an "
               f"overhead). The unit is a deployment: {s.pairs} "
               f"pair(s) of a baseline and a stack deployment {_design(s)}, "
               f"{s.repeats} sweep(s) each; each level's interval comes from that level's own pair differences (the "
               "pairs' own speeds and its windows' noise; pooled with the host's A/A at the level where one is "
               "stored), in log terms for throughput and TTFT p95 and in points for goodput (a level whose pairs "
               "all differed by the same floored at one request of a window), with one error budget for the compare: "
               "Holm's correction over every level and endpoint, weighted (throughput 60% of the 5%, goodput and "
               "TTFT p95 20% each, split evenly over the levels). Overhead/gain: the corrected test "
               f"rejects no effect; equivalent: the 90% interval lies within ±{100 * s.margin:.0f}% (goodput: "
               "points" + (f"; TTFT p95: ±{100 * s.ttft_margin:.0f}%" if s.ttft_margin else "") + "); otherwise "
               "inconclusive, with the smallest throughput change this run could have detected (80% power). "
               + ("Sequential: the compare looked after every pair from the second and stopped once every level "
                  "was decided; each look tests at an O'Brien-Fleming-type group-sequential boundary (Lan-DeMets "
                  "alpha spending), so looking often does not raise the 5% false-positive rate, and a decision "
                  "stays made (the 'decided after' column). " if s.stopping else "")
               + (f"Pooled with this host's latest A/A of the profile ({s.aa.run_id})."
                  if s.aa and s.aa.components else "No A/A of this profile on this host yet (`make compare "
                  "STACK=vllm PROFILE=...`): the intervals rest on this compare's pairs alone."))
    rows = [[lv.level_text, f"**{lv.verdict}**" + (f" ({lv.why})" if lv.why and lv.judged else ""),
             _cell("throughput", lv), _cell("goodput", lv), _cell("ttft_p95", lv),
             detectable("throughput", lv.endpoints["throughput"]).removeprefix("this run could have detected ")
             .removesuffix(" and no less") if "throughput" in lv.endpoints else (lv.why or "—")]
            + ([_decided(s, lv)] if s.stopping else []) for lv in s.levels]
    return ("Verdicts by level", caption, ["level", "verdict", "throughput", "goodput", "TTFT p95", "throughput MDE"]
            + (["decided after"] if s.stopping else []), rows)


def _decided(s: CompareSummary, lv: LevelDelta) -> str:
    assert s.stopping is not None
    got = {NAMES[k]: d[lv.level].pairs for k, d in s.stopping.decided.items() if lv.level in d}
    if not got:
        return "—"
    return ", ".join(f"{name} {n}" for name, n in got.items()) + " pairs"
