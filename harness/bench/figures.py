"""Figures of the harness benchmark measured over rounds, and what may be concluded from them.

A figure measured in several interleaved rounds is a `Spread`: its rounds, summarised by their mean (or median)
and their range min…max. A target is judged against the worst round, never against the mean alone: a target
is met only if every round meets it. A value that cannot be physical (a client using less than no CPU, a ratio
of such values) is an `Invalid` carrying its reason: it is reported as invalid, never as a result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Spread:
    """One figure over rounds (round order kept)."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one round")
        return cls(tuple(float(v) for v in values))

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    @property
    def lo(self) -> float:
        return min(self.values)

    @property
    def hi(self) -> float:
        return max(self.values)

    def to_json(self) -> dict:
        return {"mean": self.mean, "median": self.median, "min": self.lo, "max": self.hi,
                "rounds": list(self.values)}


@dataclass(frozen=True)
class Invalid:
    """A figure that could not be measured: what went wrong, in words a reader can act on."""

    reason: str

    def to_json(self) -> dict:
        return {"invalid": self.reason}


Figure = Spread | Invalid


@dataclass(frozen=True)
class Verdict:
    """A target judged against a figure's worst round; met is None where the figure is invalid."""

    target: str  # e.g. "layerbench TTFT p50 excess over the floor at c=64 ≤ 0.5 ms"
    met: bool | None
    detail: str  # e.g. "worst round +0.31 ms"

    @property
    def word(self) -> str:
        return {True: "met", False: "NOT MET", None: "not judged"}[self.met]

    def to_json(self) -> dict:
        return {"target": self.target, "met": self.met, "detail": self.detail}


def at_most(target: str, fig: Figure, limit: float, unit: str = " ms") -> Verdict:
    """Met when the highest round is ≤ limit."""
    if isinstance(fig, Invalid):
        return Verdict(target, None, f"invalid: {fig.reason}")
    return Verdict(target, fig.hi <= limit, f"worst round {fig.hi:+.2f}{unit}, mean {fig.mean:+.2f}{unit}")


def at_least(target: str, fig: Figure, limit: float, unit: str = "×") -> Verdict:
    """Met when the lowest round is ≥ limit."""
    if isinstance(fig, Invalid):
        return Verdict(target, None, f"invalid: {fig.reason}")
    return Verdict(target, fig.lo >= limit, f"worst round {fig.lo:.1f}{unit}, mean {fig.mean:.1f}{unit}")


def positive(values: Sequence[float], what: str, reason: str) -> Figure:
    """The spread of values that must all be > 0 (a cost, a rate), or Invalid naming the rounds that are not."""
    bad = [(i + 1, v) for i, v in enumerate(values) if not np.isfinite(v) or v <= 0]
    if bad:
        rounds = ", ".join(f"round {i}: {v:+.1f}" for i, v in bad)
        return Invalid(f"{what} ≤ 0 is impossible ({rounds}): {reason}")
    return Spread.of(values)


def ratio(num: Figure, den: Figure) -> Figure:
    """Round-by-round num/den of two figures measured in the same rounds; invalid if either is."""
    for fig in (num, den):
        if isinstance(fig, Invalid):
            return Invalid(f"from an invalid figure ({fig.reason})")
    assert isinstance(num, Spread) and isinstance(den, Spread)
    return Spread.of([a / b for a, b in zip(num.values, den.values, strict=True)])
