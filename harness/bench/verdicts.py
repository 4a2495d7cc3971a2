"""Does a compare's verdict keep its promises on real deployments? Whole compares (`layerbench compare`, K pairs
of real reference-engine deployments each) against a known truth, the engine's noise set to the CPU host's
measured components: a deployment factor exp(0.12 Z), a window factor exp(0.09 Z) (`deployment_sigma`,
`window_sigma`).

- T1, A/A: `sim` against `sim`. Per level, how often the 95% interval excludes 0 (promised 5%); per compare, how
  often any level is called an overhead or a gain (Holm across the levels).
- T2, power: `sim-proxy` holding each request long enough for a ~40% slowdown, against the same noise.
- T3, coverage: how often the interval holds the true delta, the same compare's delta measured without noise
  (the reference engine is exact to well under 1% there), and the median half-width against the interval a
  known variance would give.

Few compares per case (each is 2K real deployments), so each rate carries its binomial uncertainty, stated."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from harness.bench.figures import Verdict
from harness.bench.section import Context, SectionResult
from harness.errors import LayerbenchError
from harness.reporting.format import markdown_table
from stacks.base import PROJECT_ROOT

SIGMA_D, SIGMA_W, PAIRS = 0.12, 0.09, 4
COMPARES = 10  # per case
SLOW = ["ttft_ms=20", "itl_ms=5"]
PROFILE = {"concurrency": [1, 4], "requests": 24, "requests_per_concurrency": 0, "output_tokens": 8,
           "input_tokens": 32, "warmup_sweep": False}


def _compare(tmp: Path, name: str, stack: str, opts: list[str], pairs: int = PAIRS) -> dict:
    """One real compare (`layerbench compare` in a process of its own, as a user runs it); its levels' throughput
    verdicts."""
    import yaml

    from harness.schemas import CompareSummary

    profile = tmp / f"{name}.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    results = tmp / "results" / name
    args = [sys.executable, "-m", "harness", "compare", "--stack", stack, "--profile", str(profile), "--pairs",
            str(pairs), "--results-dir", str(results), "--reports-dir", str(tmp / "reports")]
    for o in opts:
        args += ["--opt", o]
    done = subprocess.run(args, capture_output=True, text=True, cwd=PROJECT_ROOT)
    if done.returncode != 0:
        raise LayerbenchError(f"a verdict benchmark's compare failed: {done.stderr.strip()[-400:]}")
    run = next(results.iterdir())
    s = CompareSummary.model_validate_json((run / "compare.json").read_text())
    return {"levels": [lv.endpoints["throughput"].model_dump() for lv in s.levels],
            "verdicts": [lv.verdict for lv in s.levels]}


def measure(ctx: Context) -> dict:
    noise = [f"deployment_sigma={SIGMA_D}", f"window_sigma={SIGMA_W}"]
    cases = {"aa": ("sim", SLOW + noise), "slow": ("sim-proxy", SLOW + noise + ["request_delay_ms=40"])}
    task = ctx.progress.add_task("verdicts: real reference-engine compares", total=1 + COMPARES * len(cases))
    truth = _compare(ctx.tmp, "truth", "sim-proxy", SLOW + ["request_delay_ms=40"], pairs=2)
    ctx.progress.advance(task)
    out: dict = {"truth": [v["estimate"] for v in truth["levels"]]}
    for key, (stack, opts) in cases.items():
        out[key] = []
        for i in range(COMPARES):
            out[key].append(_compare(ctx.tmp, f"{key}{i}", stack, opts))
            ctx.progress.advance(task)
    return out


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of k successes in n."""
    if n == 0:
        return 0.0, 1.0
    p, z = k / n, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _binomial(k: int, n: int) -> str:
    """k of n as a percent with its 95% Wilson interval."""
    if n == 0:
        return "—"
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.0f}% ({k}/{n}; 95% {100 * lo:.0f}–{100 * hi:.0f}%)"


def figures(data: dict) -> dict:
    aa = [lv for c in data["aa"] for lv in c["levels"] if lv["lo"] is not None]
    slow = [(lv, t) for c in data["slow"] for lv, t in zip(c["levels"], data["truth"], strict=True)
            if lv["lo"] is not None]
    known = 1.96 * math.sqrt((2 * SIGMA_D ** 2 + 2 * SIGMA_W ** 2) / PAIRS)
    return {
        "t1_level": (sum(lv["lo"] > 0 or lv["hi"] < 0 for lv in aa), len(aa)),
        "t1_compare": (sum(any(v in ("overhead", "gain") for v in c["verdicts"]) for c in data["aa"]),
                       len(data["aa"])),
        "t2_power": (sum(lv["verdict"] == "overhead" for lv, _ in slow), len(slow)),
        "t3_cover": (sum(lv["lo"] <= t <= lv["hi"] for lv, t in slow) + sum(lv["lo"] <= 0 <= lv["hi"] for lv in aa),
                     len(slow) + len(aa)),
        "t3_width": float(np.median([(lv["hi"] - lv["lo"]) / 2 for lv in aa] + [(lv["hi"] - lv["lo"]) / 2
                                                                                for lv, _ in slow])) / known,
        "truth_pct": [100 * (math.exp(t) - 1) for t in data["truth"]],
    }


def render(f: dict, seconds: float) -> list[str]:
    rows = [["T1 A/A: a level's 95% interval excludes 0", "2.9–7.1%", _binomial(*f["t1_level"])],
            ["T1 A/A: any level called overhead/gain (Holm)", "≤ 8%", _binomial(*f["t1_compare"])],
            [f"T2 a known {f['truth_pct'][-1]:+.0f}% slowdown called an overhead", "≥ 80%", _binomial(*f["t2_power"])],
            ["T3 the interval holds the true delta", "93–97%", _binomial(*f["t3_cover"])],
            ["T3 median half-width / the known-variance interval's", "≤ 1.5", f"{f['t3_width']:.2f}"]]
    return ["## Verdicts on real deployments", "",
            f"{COMPARES} real compares per case, {PAIRS} deployment pairs each, the reference engine's noise at this "
            f"host's measured components (deployment ±{100 * SIGMA_D:.0f}%, window ±{100 * SIGMA_W:.0f}%); the "
            f"true delta is the same compare's without noise ({', '.join(f'{x:+.1f}%' for x in f['truth_pct'])} "
            f"at c=1, 4). Each rate with its 95% binomial interval: with this few compares, a rate is a check "
            f"that the method is not far off, not a measurement of its exact size (the unit tests' Monte Carlo "
            f"runs 400 per case). {seconds:.0f} s.", "",
            *markdown_table(["case", "target", "measured"], rows).splitlines(), ""]


def _judged(target: str, k: int, n: int, lo: float, hi: float) -> Verdict:
    """Met when the rate lies in [lo, hi]; NOT MET only when its whole 95% interval lies outside (with this few
    compares, a rate just outside is not evidence); else not judged."""
    rate = k / n if n else math.nan
    w_lo, w_hi = wilson(k, n)
    met = True if lo <= rate <= hi else (False if w_hi < lo or w_lo > hi else None)
    return Verdict(target, met, _binomial(k, n))


def verdicts(f: dict) -> list[Verdict]:
    return [_judged("A/A: any level called overhead/gain per compare ≤ 8% (real compares)", *f["t1_compare"], 0.0,
                    0.08),
            _judged("coverage of the true delta 93–97% (real compares)", *f["t3_cover"], 0.93, 0.97)]


def section(ctx: Context) -> SectionResult:
    t0 = time.monotonic()
    data = measure(ctx)
    f = figures(data)
    return SectionResult("verdicts", render(f, time.monotonic() - t0), {"figures": f, "compares": data},
                         verdicts(f))
