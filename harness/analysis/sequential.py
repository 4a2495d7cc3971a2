"""Looking after every pair without raising the false-positive rate: group-sequential boundaries from an
alpha-spending function.

A compare adds deployment pairs until each judged level and endpoint is decided. Testing at 5% after every pair
would, over five looks, call a difference that is not there about 14% of the time (Armitage, McPherson & Rowe,
1969). Instead each look may spend only part of the 5%: Lan & DeMets' (1983) O'Brien-Fleming-type spending
function (gsDesign's sfLDOF), alpha/2 spent on each side, t the information fraction (pairs measured / the most the
compare may measure). It spends almost nothing early (a level is called after 2 of 6 pairs only when its effect
is far past the noise) and leaves the last look's boundary near the fixed design's (1.96 becomes about 2.0-2.03),
so a compare that runs to the end loses little power. The boundary of each look follows from what was spent
before: the z-statistics of successive looks are those of a Brownian motion at t_1 < t_2 < ..., and c_j solves
P(no earlier crossing, |Z_j| >= c_j) = alpha(t_j) - alpha(t_{j-1}) (Jennison & Turnbull, "Group Sequential
Methods with Applications to Clinical Trials", 2000, ch. 7 and 19), integrated numerically on a grid here.

A look's boundary is applied to the t-statistic through its nominal p-value (the two-sided p that c_j has under
the normal), the usual way a spending boundary is carried to small samples. Equivalence (two one-sided tests at
5% each) uses the same spending at 10% two-sided. Holm's step-down across the compare's levels and endpoints is
done at each look with the boundaries of each hypothesis' share of alpha (its weight over the weight of those left),
and one rejected at one look stays rejected (a sequential Holm, Tamhane, Mehta & Liu, Biometrics 2010)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize
from scipy import stats as st

GRID = 601  # points per look on the continuation region: boundaries agree with 2001 points to < 1e-3
FAR = 8.0  # a z boundary for a look that may spend nothing (P(|Z| > 8) ~ 1e-15)


def spent(alpha: float, t: float) -> float:
    """The two-sided alpha spent by information t: alpha / 2 on each side, each by Lan-DeMets' O'Brien-Fleming-type
    function f(t; a) = 2 - 2 Phi(Phi^-1(1 - a/2) / sqrt(t)) (gsDesign's sfLDOF, applied as gsDesign does to a
    symmetric two-sided design: https://search.r-project.org/CRAN/refmans/gsDesign/html/sfLDOF.html). Five even
    looks at 5% give boundaries 4.88, 3.36, 2.68, 2.29, 2.03."""
    if t <= 0:
        return 0.0
    z = st.norm.isf(alpha / 4)
    return float(min(alpha, 4 * st.norm.sf(z / math.sqrt(min(t, 1.0)))))


@lru_cache(maxsize=512)
def boundaries(alpha: float, fractions: tuple[float, ...]) -> tuple[float, ...]:
    """Two-sided z boundaries c_1..c_J for looks at the increasing information fractions (the last may be 1)."""
    if not fractions or any(b <= a for a, b in zip(fractions, fractions[1:], strict=False)) or fractions[0] <= 0:
        raise ValueError(f"information fractions must increase from above 0: {fractions}")
    out: list[float] = []
    grid = dens = None  # the sub-density of S = Z sqrt(t) at the previous look, over its continuation region
    prev_t = 0.0
    for t in fractions:
        share = spent(alpha, t) - spent(alpha, prev_t)
        dt = t - prev_t
        if grid is None:
            c = float(st.norm.isf(share / 2)) if share > 0 else FAR
            b = c * math.sqrt(t)
            grid = np.linspace(-b, b, GRID)
            dens = st.norm.pdf(grid, scale=math.sqrt(t))
        else:
            w = _weights(grid)
            sd = math.sqrt(dt)

            def exit_prob(b: float, grid=grid, dens=dens, w=w, sd=sd) -> float:
                tail = st.norm.sf((b - grid) / sd) + st.norm.cdf((-b - grid) / sd)
                return float((w * dens * tail).sum())

            if share <= 0 or exit_prob(FAR * math.sqrt(t)) >= share:
                b = FAR * math.sqrt(t)
            else:
                b = optimize.brentq(lambda b, share=share: exit_prob(b) - share, 1e-9, FAR * math.sqrt(t), xtol=1e-10)
            new = np.linspace(-b, b, GRID)
            kernel = st.norm.pdf((new[:, None] - grid[None, :]) / sd) / sd
            dens = kernel @ (w * dens)
            grid = new
            c = b / math.sqrt(t)
        out.append(float(c))
        prev_t = t
    return tuple(out)


def _weights(grid: np.ndarray) -> np.ndarray:
    """Trapezoid weights on an even grid."""
    h = grid[1] - grid[0]
    w = np.full(grid.size, h)
    w[0] = w[-1] = h / 2
    return w


def nominal_p(alpha: float, fractions: tuple[float, ...]) -> float:
    """The two-sided p-value a test must reach at the last of these looks."""
    return float(2 * st.norm.sf(boundaries(round(alpha, 12), tuple(round(f, 9) for f in fractions))[-1]))


def fractions(looks: list[int], most: int, final: bool) -> tuple[float, ...]:
    """Information fractions of the looks made after `looks` pairs (increasing), out of `most` pairs; the final
    look spends what is left (t = 1) even when it comes before `most` pairs (the budget ran out)."""
    out = [min(1.0, k / most) for k in looks]
    if final:
        out[-1] = 1.0
    # two looks at the same fraction (a look past `most`) are one
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class Look:
    """One look of a sequential compare, as an endpoint's judge sees it: the information fractions of every look so
    far (this one last) and, per level, the verdict an earlier look decided (a decision stays made)."""

    pairs: int
    fractions: tuple[float, ...]
    earlier: tuple[str | None, ...] = ()
    target: float | None = None  # the effect this endpoint must be able to detect before it is called equivalent

    @property
    def final(self) -> bool:
        return self.fractions[-1] >= 1.0


@dataclass(frozen=True)
class Estimates:
    """A family of tests at one look (one endpoint's levels, or a compare's levels x endpoints): per hypothesis the
    estimate, its standard error and degrees of freedom (each level's own noise,
    harness.analysis.verdict.level_noise) and its (unadjusted) two-sided p-value, NaN where a level has no variance
    to judge by; its equivalence margin (in the estimate's terms), which way is better, its share of the family's
    alpha (weight; None: equal shares), what an earlier look decided, and the effect it must be able to detect before
    it is called equivalent (NaN: none)."""

    est: np.ndarray
    se: np.ndarray
    df: np.ndarray
    p: np.ndarray
    margin: np.ndarray | float = 0.05
    direction: np.ndarray | int = 1
    weight: np.ndarray | None = None
    earlier: tuple[str | None, ...] = ()
    target: np.ndarray | float | None = None

    def of(self, name: str, i: int) -> float:
        x = getattr(self, name)
        return float(x[i]) if isinstance(x, np.ndarray) else float(math.nan if x is None else x)


def calls(e: Estimates, look: Look, alpha: float = 0.05) -> list[str]:
    """Per hypothesis, this look's verdict: one an earlier look decided keeps its verdict; the open ones go through a
    weighted Holm step-down at this look's boundaries (hypothesis i at alpha x w_i / the weight of those not yet
    rejected; a rejected one's share passes to the rest: Holm 1979's weighted procedure, carried to group-sequential
    looks as Maurer & Bretz, Statistics in Biopharmaceutical Research 5 (2013)
    311-320, doi:10.1080/19466315.2013.807748, do), and those not rejected
    are `equivalent` when the two one-sided tests of the margin pass at this look's boundary (spending 2 x 5%,
    two-sided) and, before the last look, this look could detect the hypothesis' target; else `inconclusive`.
    The look's own `earlier` and `target` stand in where the family has none."""
    est, se, df, p = e.est, e.se, e.df, e.p
    m = len(est)
    w = np.full(m, 1.0) if e.weight is None else np.asarray(e.weight, dtype=float)
    earlier = e.earlier or look.earlier
    out: list[str | None] = [earlier[i] if i < len(earlier) else None for i in range(m)]
    left = first = float(sum(w[i] for i in range(m) if out[i] not in ("overhead", "gain")))
    testable = [i for i in range(m) if out[i] is None and np.isfinite(p[i])]
    for i in sorted(testable, key=lambda i: p[i] / w[i]):
        if left > 0 and p[i] < nominal_p(alpha * w[i] / left, look.fractions):
            out[i] = "gain" if est[i] * e.of("direction", i) > 0 else "overhead"
            left -= w[i]
        else:
            break
    # Before the last look a hypothesis is called equivalent only once this look could also have found the target
    # effect (at its share of Holm's strictest level): a 3% overhead lies inside a 5% margin, and calling it
    # equivalent after two pairs would stop the compare before it can be seen. The rule reads the interval's width,
    # not the estimate, so stopping does not select estimates near zero (which would make the intervals at stop
    # cover more than they say).

    def equivalent(i: int) -> bool:
        if not (np.isfinite(se[i]) and df[i] > 0):
            return False
        target = e.of("target", i) if e.target is not None else (look.target if look.target is not None
                                                                  else math.nan)
        strictest = alpha * w[i] / max(first, w[i])  # the share before this look's rejections
        ready = look.final or not math.isfinite(target) or detectable(se[i], df[i], look, strictest) <= target
        t_eq = float(st.t.isf(nominal_p(2 * alpha, look.fractions) / 2, df[i]))
        return ready and abs(est[i]) + t_eq * se[i] < e.of("margin", i)

    return [v if v is not None else ("equivalent" if equivalent(i) else "inconclusive") for i, v in enumerate(out)]


def detectable(se: float, df: float, look: Look, alpha: float = 0.05, power: float = 0.80) -> float:
    """The smallest effect this look's boundary finds with `power`: (t at the boundary + t at the power) x se."""
    if df <= 0:
        return math.inf
    return float((st.t.isf(nominal_p(alpha, look.fractions) / 2, df) + st.t.ppf(power, df)) * se)


@dataclass(frozen=True)
class Looks:
    """A compare's look for every endpoint: the pairs so far, the information fractions, what earlier looks decided
    (endpoint -> level -> verdict) and the throughput effect the compare is sized for (a share)."""

    pairs: int
    fractions: tuple[float, ...]
    decided: dict[str, dict[float, str]]
    target_mde: float

    def look(self) -> Look:
        """This look as a family sees it (what each hypothesis decided earlier, and its target, come with it)."""
        return Look(pairs=self.pairs, fractions=self.fractions)

    def endpoint(self, key: str, levels: list[float], log: bool, margin: float) -> Look:
        """Throughput, the endpoint the compare is sized for, must be able to detect the target before a level is
        called equivalent; goodput and TTFT p95 are equivalent once their interval at the look's boundary lies
        inside the margin."""
        earlier = self.decided.get(key, {})
        target = (math.log1p(self.target_mde) if log else self.target_mde) if key == "throughput" else None
        return Look(pairs=self.pairs, fractions=self.fractions, earlier=tuple(earlier.get(c) for c in levels),
                    target=target)
