"""Sweeps of one knob, each value measured against the bare engine (`make sweep`):

- SETTING=max_num_seqs=16,64: an engine setting. Each value is deployed twice, bare vLLM and behind the layer,
  so the same change is measured on both: does what helps the bare engine still help behind the layer?
- OPT=ingress_replicas=1,2,4: a typed option of the stack. One baseline, then the layer in each shape: which
  part of the layer costs, with the delta and each process's CPU per shape.
- SHAPES=128x128,2048x128: the request's shape (harness.procedures.shapes), a bare vLLM and the layer at each.

A value the engine or the stack rejects fails its own point (with the engine's log tail) and the others go on."""

from __future__ import annotations

from pydantic import ValidationError

from harness.analysis.deltas import level_deltas
from harness.errors import LayerbenchError
from harness.profile.schema import EngineSettings, LoadProfile
from harness.schemas import LevelDelta, RunSummary
from harness.schemas.sweep import Effect, Kind, Point, ShapeGap, SweepSummary
from stacks.base import DeploySettings, Stack
from stacks.base.replicas import build_stack

# replicas and their spread are not swept: the GPUs each deployment may use were chosen for the profile's count
SETTINGS = sorted(set(EngineSettings.model_fields) - {"extra_args", "replicas", "baseline_spread"})


def parse_values(spec: str, what: str) -> tuple[str, list[str]]:
    """`key=v1,v2,...` -> (key, [raw values]); one clear message for anything else."""
    key, sep, raw = spec.partition("=")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not sep or not key.strip() or not values:
        raise LayerbenchError(f"{what} takes key=value1,value2,... (e.g. {what}=max_num_seqs=16,64), got {spec!r}")
    if len(set(values)) != len(values):
        raise LayerbenchError(f"{what} {spec!r} names a value twice")
    return key.strip().replace("-", "_"), values


def _typed(raw: str) -> str | int | float | bool:
    from stacks.base import parse_options

    return parse_options([f"v={raw}"])["v"]










def plan(kind: Kind, spec: str, stack_cls: type[Stack], settings: DeploySettings
         ) -> tuple[str, list[str], list[tuple[str, Stack]], list[Point]]:
    """(key, values, the deployments in order, the points): every value checked before anything is deployed."""
    key, values = parse_values(spec, "SETTING" if kind == "setting" else "OPT")
    if kind == "setting" and key not in SETTINGS:
        raise LayerbenchError(f"unknown engine setting {key!r}: settings are {', '.join(SETTINGS)}")
    if kind == "option" and key not in stack_cls.allowed_options() - {"port"}:
        known = ", ".join(sorted(stack_cls.allowed_options() - {"port"})) or "none"
        raise LayerbenchError(f"stack {stack_cls.kind} has no option {key!r}; its options: {known}")
    targets: list[tuple[str, Stack]] = []
    points = []
    for raw in values:
        try:
            if kind == "setting":
                engine = EngineSettings.model_validate({**settings.engine.model_dump(), key: _typed(raw)})
                stack = build_stack(stack_cls, settings.model_copy(update={"engine": engine}))
            else:
                stack = build_stack(stack_cls, settings.model_copy(update={"options": {**settings.options,
                                                                                        key: _typed(raw)}}))
        except ValidationError as e:
            raise LayerbenchError(f"{key}={raw} is not a valid engine setting: "
                                  + "; ".join(x["msg"] for x in e.errors())) from None
        except LayerbenchError as e:
            raise LayerbenchError(f"the shape {key}={raw} cannot be built: {e}") from None
        if kind == "setting":
            base = stack.baseline()
            if base is None:
                raise LayerbenchError(f"stack {stack_cls.kind} names no baseline to sweep a setting against")
            targets += [(f"baseline@{key}={raw}", base), (f"stack@{key}={raw}", stack)]
            points.append(Point(value=raw, baseline_label=f"baseline@{key}={raw}", stack_label=f"stack@{key}={raw}"))
        else:
            if not targets:
                base = stack.baseline()
                if base is None:
                    raise LayerbenchError(f"stack {stack_cls.kind} names no baseline to measure its shapes against")
                targets.append(("baseline", base))
            targets.append((f"{key}={raw}", stack))
            points.append(Point(value=raw, baseline_label="baseline", stack_label=f"{key}={raw}"))
    return key, values, targets, points


def settle(s: SweepSummary, runs: dict[str, RunSummary], failures: dict[str, str], profile: LoadProfile,
           host: dict | None = None) -> None:
    """Per point the layer's deltas; for a setting, the change's effect on each side; the one-sentence answer.
    host: the latest A/A's variance components for the profile. A sweep deploys each value once, so its verdicts
    rest on the host's A/A (pooled in): without one they are inconclusive, and the sentence says so."""
    levels, open_loop = profile.levels(), profile.open_loop
    how = {"host": host or {}, "margin": profile.equivalence_margin}
    for p in s.points:
        p.failed = {k: v for k, v in failures.items() if k in (p.baseline_label, p.stack_label)}
        p.levels = level_deltas(runs.get(p.baseline_label), runs.get(p.stack_label), levels, open_loop, **how)
    if s.kind == "setting" and len(s.points) >= 2:
        first, last = s.points[0], s.points[-1]
        bare = level_deltas(runs.get(first.baseline_label), runs.get(last.baseline_label), levels, open_loop, **how)
        layer = level_deltas(runs.get(first.stack_label), runs.get(last.stack_label), levels, open_loop, **how)
        s.effects = [Effect(level=b.level_text, baseline=b, stack=st) for b, st in zip(bare, layer, strict=True)]
    if s.kind == "option":
        s.shape_gap = _shape_gap(s, runs, levels, open_loop, how)
    if s.kind == "shape":
        from harness.procedures.shapes import shape_sentence

        s.conclusion = shape_sentence(s.stack, s.points)
    else:
        s.conclusion = setting_sentence(s) if s.kind == "setting" else option_sentence(s)


def _shape_gap(s: SweepSummary, runs: dict[str, RunSummary], levels, open_loop: bool, how: dict) -> ShapeGap | None:
    """The least costly shape against the runner-up, head to head at the highest level both measured: is the
    difference between them beyond noise?"""
    ranked = sorted(((top.delta_pct, p) for p in s.points
                     if (top := _top(p.levels, lambda lv: lv.delta_pct is not None)) is not None), key=lambda x: -x[0])
    if len(ranked) < 2:
        return None
    best, second = ranked[0][1], ranked[1][1]
    gap = _top(level_deltas(runs.get(second.stack_label), runs.get(best.stack_label), levels, open_loop, **how),
               lambda lv: lv.delta_pct is not None)
    return ShapeGap(best=best.value, second=second.value, delta=gap) if gap else None


def _top(levels: list[LevelDelta], need) -> LevelDelta | None:
    return next((lv for lv in reversed(levels) if need(lv)), None)


def setting_sentence(s: SweepSummary) -> str:
    """Seed-study form: '<key> a → b at c=N: bare vLLM x → y tok/s (+g%); behind <stack> ... (+h%): <judgement>'."""
    e = next((e for e in reversed(s.effects) if e.baseline.delta_pct is not None and e.stack
              and e.stack.delta_pct is not None), None)
    if e is None:
        failed = [f"{k} ({v.splitlines()[0][:120]})" for p in s.points for k, v in p.failed.items()]
        return (f"no level was measured on all four deployments, so the change {s.key} {s.values[0]} → "
                f"{s.values[-1]} has no answer" + (f"; failed: {'; '.join(failed)}" if failed else ""))
    b, st = e.baseline, e.stack
    assert st is not None and b.delta_pct is not None and st.delta_pct is not None
    head = (f"{s.key} {s.values[0]} → {s.values[-1]} at {e.level}: bare vLLM {b.baseline_tok_s:,.0f} → "
            f"{b.stack_tok_s:,.0f} tok/s ({b.delta_pct:+.1f}%, {b.verdict}); behind {s.stack} "
            f"{st.baseline_tok_s:,.0f} → {st.stack_tok_s:,.0f} tok/s ({st.delta_pct:+.1f}%, {st.verdict})")
    if b.verdict not in ("overhead", "gain"):
        why = ("the change does not move the bare engine beyond its noise here, so there is nothing for the "
               "layer to hold back" if b.ci is not None else "without an A/A of this profile on this host "
               "(`make compare STACK=vllm`) a sweep, one deployment per value, has no interval to judge by")
    elif b.delta_pct > 0:
        why = ("the layer caps the engine: most of what the change gives the bare engine does not reach clients "
               f"through {s.stack}" if st.delta_pct < b.delta_pct / 2 else "the gain carries through the layer")
    else:
        why = f"the change costs the bare engine throughput, and {st.delta_pct:+.1f}% behind the layer"
    return f"{head}: {why}."


def option_sentence(s: SweepSummary) -> str:
    parts = []
    for p in s.points:
        top = _top(p.levels, lambda lv: lv.delta_pct is not None)
        if top is None:
            why = next(iter(p.failed.values()), "not measured").splitlines()[0][:160]
            parts.append(f"{s.key}={p.value}: failed ({why})")
            continue
        cores = sum(top.stack_cpu_cores.values())
        parts.append(f"{s.key}={p.value}: {top.delta_pct:+.1f}% at {top.level_text} ({top.verdict}), the "
                     f"deployment used {cores:.2f} cores")
    best = ""
    if (g := s.shape_gap) is not None and g.delta.delta_pct is not None:
        head = (f"{s.key}={g.best} against {s.key}={g.second} head to head: {g.delta.delta_pct:+.1f}% at "
                f"{g.delta.level_text} ({g.delta.verdict})")
        best = (f"; least costly: {s.key}={g.best} ({head})" if g.delta.verdict == "gain"
                else f"; no shape is cheaper beyond the noise ({head})")
    return f"{s.stack} against the bare engine, shape by shape: " + "; ".join(parts) + best + "."
