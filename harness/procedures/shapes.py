"""The layer's cost across request shapes (`make sweep SHAPES=128x128,2048x128,...`): at each (input × output)
shape a bare vLLM and the layer are deployed with the same engine settings and measured at the profile's levels.
A layer's cost is paid per request and per streamed chunk while the engine's time grows with tokens, so its share
of the time depends on the shape: this says how, for the shapes a user's traffic has."""

from __future__ import annotations

from pydantic import ValidationError

from harness.errors import LayerbenchError
from harness.profile.schema import LoadProfile, problems
from stacks.base import DeploySettings, Stack
from stacks.base.replicas import build_stack

SHAPES_MAX = 16


def parse_shapes(spec: str) -> list[tuple[int, int]]:
    """`128x128,2048x128` -> [(128, 128), (2048, 128)]; one clear message for anything else."""
    out = []
    for raw in (v.strip() for v in spec.split(",")):
        i, sep, o = raw.lower().partition("x")
        if not sep or not i.isdigit() or not o.isdigit():
            raise LayerbenchError(f"SHAPES takes input x output token pairs, e.g. SHAPES=128x128,2048x128; got {raw!r}")
        out.append((int(i), int(o)))
    if len(set(out)) != len(out):
        raise LayerbenchError(f"SHAPES {spec!r} names a shape twice")
    if not 2 <= len(out) <= SHAPES_MAX:
        raise LayerbenchError(f"SHAPES takes 2 to {SHAPES_MAX} shapes, got {len(out)}")
    return out


def shape_name(shape: tuple[int, int]) -> str:
    return f"{shape[0]}x{shape[1]}"


def plan_shapes(spec: str, stack_cls: type[Stack], settings: DeploySettings, profile: LoadProfile):
    """(values, [(label, deployment)], {label: its profile}, [(value, baseline label, stack label)]): every shape
    checked against max_model_len before anything is deployed; the engine settings are the profile's for all."""
    values, targets, profiles, points = [], [], {}, []
    for shape in parse_shapes(spec):
        name = shape_name(shape)
        try:
            shaped = LoadProfile.model_validate({**profile.model_dump(), "name": profile.name,
                                                 "input_tokens": shape[0], "output_tokens": shape[1]})
        except ValidationError as e:
            raise LayerbenchError(f"shape {name}: {problems(e)}") from None
        stack = build_stack(stack_cls, settings)
        base = stack.baseline()
        if base is None:
            raise LayerbenchError(f"stack {stack_cls.kind} names no baseline to measure its shapes against")
        b, s = f"baseline@{name}", f"stack@{name}"
        targets += [(b, base), (s, stack)]
        profiles[b] = profiles[s] = shaped
        values.append(name)
        points.append((name, b, s))
    return values, targets, profiles, points


def shape_sentence(stack: str, points) -> str:
    """Where the layer costs most and least, at the highest level every shape measured."""
    by_level: dict[str, dict[str, float]] = {}
    order: list[str] = []
    for p in points:
        for lv in p.levels:
            if lv.delta_pct is not None:
                if lv.level_text not in by_level:
                    order.append(lv.level_text)
                by_level.setdefault(lv.level_text, {})[p.value] = lv.delta_pct
    full = [lv for lv in order if len(by_level[lv]) == len(points)]
    if not full:
        return f"no level was measured at every shape behind {stack}, so the shapes cannot be set side by side"
    level = full[-1]
    deltas = by_level[level]
    worst = min(deltas, key=deltas.__getitem__)
    best = max(deltas, key=deltas.__getitem__)
    text = (f"behind {stack} at {level} the delta runs from {deltas[worst]:+.1f}% at {worst.replace('x', '/')} to "
            f"{deltas[best]:+.1f}% at {best.replace('x', '/')}")
    wi, wo = map(int, worst.split("x"))
    bi, bo = map(int, best.split("x"))
    if bi > wi and bo <= wo:
        text += (": longer prompts dilute it, so its cost is paid per request or per streamed chunk, not per prompt "
                 "token")
    elif bo > wo and bi <= wi:
        text += ": longer answers dilute it, so its cost is paid per request rather than per streamed token"
    return text
