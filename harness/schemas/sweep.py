"""A sweep's record (`make sweep`): each value's point, the effect of the change on each side, and the request
shape's gap; written by harness/procedures/variants.py, read by its report."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from harness.schemas.verdicts import LevelDelta

Kind = Literal["setting", "option", "shape"]


class Point(BaseModel):
    """One value of the knob: its deployments' labels and the layer's deltas against the bare engine."""

    value: str
    baseline_label: str
    stack_label: str
    levels: list[LevelDelta] = []
    failed: dict[str, str] = {}  # label -> why (first lines of the error, with the engine's log tail)


class Effect(BaseModel):
    """The knob moved from its first value to its last, on each side, at one level."""

    level: str  # "c=8", or "8 req/s" in an open-loop profile
    baseline: LevelDelta  # "baseline" = first value, "stack" = last value (bare engine)
    stack: LevelDelta | None  # the same change behind the layer


class ShapeGap(BaseModel):
    """The least costly shape of the layer against the runner-up ("baseline" = runner-up, "stack" = best)."""

    best: str
    second: str
    delta: LevelDelta


class SweepSummary(BaseModel):
    run_id: str
    stack: str
    kind: Kind
    key: str
    values: list[str]
    profile: str
    repeats: int
    status: str = "running"
    points: list[Point] = []
    effects: list[Effect] = []
    shape_gap: ShapeGap | None = None  # OPT sweeps: is the least costly shape cheaper beyond noise?
    conclusion: str = ""
    failures: dict[str, str] = {}
    wall_s: float | None = None
