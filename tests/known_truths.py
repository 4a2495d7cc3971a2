"""The chance that each known-truth test's compare comes out as the test asserts, from a Monte Carlo of its own design
(pairs, levels, fixed or sequential looks) with the effect and the noise the test measured on this host, judged by
the compare's own code (harness.analysis.judging.judge_differences, harness.analysis.deltas.combined).

Each test's pair differences, per endpoint and level, were read from its compare.json over several runs of the
alone lane (`python -m tests.known_truths BASETEMP...` reads them again from `pytest --basetemp=BASETEMP` folders);
MEASURED holds the figures, with the date. A draw is the measured mean effect plus independent normal noise of the
measured spread at each endpoint and level: for a test that asserts the same verdict at every level this is
conservative, since a deployment's levels and endpoints move together. tests/analysis/test_known_truth_power.py
recomputes every chance and holds it at 99.5% or more."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.analysis.conclude import pair_order
from harness.analysis.deltas import combined
from harness.analysis.judging import ENDPOINTS, Design, differences, judge_differences, resolution
from harness.analysis.sequential import Looks, fractions
from harness.analysis.verdict import Verdict

KEYS = tuple(ep.key for ep in ENDPOINTS)
Verdicts = dict[str, list[Verdict]]


@dataclass(frozen=True)
class Noise:
    """What a test's compares measured, per endpoint: the mean pair difference and the spread of one pair's
    difference (sd, with its degrees of freedom) at each level, and goodput's resolution (1 / requests)."""

    levels: tuple[float, ...]
    mean: Mapping[str, tuple[float, ...]]
    sd: Mapping[str, tuple[float, ...]]
    df: int
    res: tuple[float, ...] = ()


@dataclass(frozen=True)
class Truth:
    """A test's design and what it asserts of the verdicts (endpoint -> per level) and of the level verdicts."""

    test: str
    pairs: int
    asserts: Callable[[Verdicts, list[tuple[str, str | None]]], bool]
    max_pairs: int | None = None  # sequential: looks from `pairs` on, stopping when every level is decided
    final_first: bool = False  # sequential: the first look is the last (the budget holds no further pair)
    all_decided: bool = False  # sequential: the test also asserts it stopped with every level decided
    target_mde: float = 0.03
    interleaved: bool = False  # both sides up at once: no order to balance (each pair's order is 0)

    def order(self, k: int) -> list[int]:
        return [0] * k if self.interleaved else pair_order(k)


def _draw(rng: np.random.Generator, noise: Noise, k: int, scale: float) -> dict[str, np.ndarray]:
    return {key: np.asarray(noise.mean[key]) + rng.normal(0, 1, (k, len(noise.levels))) * np.asarray(noise.sd[key])
            * scale for key in KEYS}


def _levels(vs: Verdicts, n: int) -> list[tuple[str, str | None]]:
    """Each level's verdict and the endpoints behind it, as the compare labels the level."""
    return [combined({key: vs[key][j] for key in KEYS}) for j in range(n)]


def _sequential(truth: Truth, noise: Noise, ds: dict[str, np.ndarray]) -> tuple[Verdicts, list, bool]:
    """The looks a sequential compare makes after truth.pairs, ..., max_pairs pairs; (verdicts, level verdicts,
    whether every level was decided) at the look it stopped at."""
    assert truth.max_pairs is not None
    looks: list[int] = []
    decided: dict[str, dict[float, str]] = {}
    for k in range(truth.pairs, truth.max_pairs + 1):
        looks.append(k)
        final = truth.final_first or k == truth.max_pairs
        look = Looks(pairs=k, fractions=fractions(looks, truth.max_pairs, final), decided=decided,
                     target_mde=truth.target_mde)
        vs = judge_differences({key: d[:k] for key, d in ds.items()}, np.array(truth.order(k)), noise.levels,
                               Design(order=truth.order(k), looks=look), list(noise.res) or None)
        for key, row in vs.items():
            for c, v in zip(noise.levels, row, strict=True):
                if v.verdict != "inconclusive":
                    decided.setdefault(key, {}).setdefault(c, v.verdict)
        done = all(v.verdict != "inconclusive" for row in vs.values() for v in row)
        if done or final:
            return vs, _levels(vs, len(noise.levels)), done
    raise AssertionError("unreachable")


def chance(truth: Truth, noise: Noise, n: int = 4000, seed: int = 0, scale: float = 1.0) -> float:
    """The share of n simulated compares of the test's design whose verdicts the test would accept; scale: the
    measured spread times this."""
    rng = np.random.default_rng(seed)
    ok = 0
    k = truth.max_pairs or truth.pairs
    for _ in range(n):
        ds = _draw(rng, noise, k, scale)
        if truth.max_pairs is not None:
            vs, lv, done = _sequential(truth, noise, ds)
            ok += (done or not truth.all_decided) and truth.asserts(vs, lv)
            continue
        vs = judge_differences(ds, np.array(truth.order(k)), noise.levels, Design(order=truth.order(k)),
                               list(noise.res) or None)
        ok += truth.asserts(vs, _levels(vs, len(noise.levels)))
    return ok / n


def measure(compares: Sequence[Path]) -> Noise:
    """Pool the pair differences of several compares of one design: each level's mean and its spread over the
    pairs (the pairs' own mean taken out per compare, so the spread is one pair's around its compare's)."""
    from harness.schemas import CompareSummary

    rows: dict[str, list[np.ndarray]] = {key: [] for key in KEYS}
    res: list[float] = []
    levels: tuple[float, ...] = ()
    df = 0
    for path in compares:
        s = CompareSummary.model_validate_json(path.read_text())
        levels = tuple(float(lv.rate if lv.rate is not None else lv.concurrency) for lv in s.levels)
        base, stack = s.runs["baseline"], s.runs["stack"]
        for ep in ENDPOINTS:
            d, _ = differences(base, stack, levels, ep)
            rows[ep.key].append(d)
        df += len(rows["throughput"][-1]) - 1
        res = [resolution(base, stack, c) or 0.0 for c in levels]
    mean = {key: tuple(float(x) for x in np.nanmean(np.vstack(rows[key]), axis=0)) for key in KEYS}
    sd = {}
    for key in KEYS:
        ss = sum(np.nansum((d - np.nanmean(d, axis=0)) ** 2, axis=0) for d in rows[key])
        sd[key] = tuple(float(math.sqrt(x / df)) if df > 0 else 0.0 for x in ss)
    return Noise(levels=levels, mean=mean, sd=sd, df=df, res=tuple(res))


def _runs(basetemps: Sequence[Path], prefix: str) -> list[Path]:
    return sorted(p for b in basetemps for p in b.glob(f"{prefix[:30]}*/results/*/compare.json")
                  if not p.parents[2].name.endswith("current"))  # pytest's link to the latest


if __name__ == "__main__":  # python -m tests.known_truths BASETEMP...: each test's noise, as MEASURED holds it
    temps = [Path(a) for a in sys.argv[1:]]
    from tests.analysis.test_known_truth_power import TRUTHS

    for t in TRUTHS:
        found = _runs(temps, t.test.split("::")[-1])
        if not found:
            print(f"{t.test}: no compare.json under {temps}")
            continue
        m = measure(found)

        def r4(d):
            return {k: tuple(round(x, 4) for x in v) for k, v in d.items()}

        print(f"{t.test.split('::')[-1]!r}: Noise(  # {len(found)} compares\n    levels={m.levels}, df={m.df}, "
              f"res={tuple(round(r, 4) for r in m.res)},\n    mean={r4(m.mean)},\n    sd={r4(m.sd)}),")
