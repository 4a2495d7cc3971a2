"""Which model directory the engine loads, from the profile's `engine.model`:
- `tiny`: the generated 2-layer Qwen2 (scripts/make_model.py), computed on this host's CPU;
- `gpu-like`: the same weights and tokenizer, with a config.json that names the GPU-like architecture (the
  `layerbench_gpulike` vLLM plugin in the engine environment) and carries the emulated step time. One directory
  per step time, derived from the tiny model's files (linked, not copied), so both sides of a compare and every
  stack load exactly the same model."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from harness.errors import LayerbenchError
from harness.profile import EngineSettings
from stacks.base import MODEL_DIR

GPU_LIKE_ARCHITECTURE = "LayerbenchGpuLikeForCausalLM"  # what engine_plugin/layerbench_gpulike registers
BLOCKING_WAIT_ENV = "LAYERBENCH_BLOCKING_WAIT"  # the plugin's switch: vLLM's queue readers block, not spin


def model_dir(engine: EngineSettings, tiny: Path = MODEL_DIR) -> Path:
    """The directory to serve; the GPU-like one is written (idempotently) from `tiny` on first use."""
    if engine.model == "tiny" or engine.step is None:
        return tiny
    if not (tiny / "config.json").exists():
        raise LayerbenchError(f"model not found at {tiny}: run `make setup`")
    config = json.loads((tiny / "config.json").read_text())
    config["architectures"] = [GPU_LIKE_ARCHITECTURE]
    config["layerbench_step"] = engine.step.model_dump(exclude={"like"})
    text = json.dumps(config, indent=2, sort_keys=True)
    out = tiny.parent / f"gpu-like-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    if not (out / "config.json").exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for f in tiny.iterdir():
            if f.name != "config.json" and not (tmp / f.name).exists():
                (tmp / f.name).symlink_to(f.resolve())
        (tmp / "config.json").write_text(text)
        try:
            tmp.rename(out)
        except OSError:  # another process wrote it first: theirs is the same
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def engine_model_env(engine: EngineSettings) -> dict[str, str]:
    """What the engine's processes need in their environment for this model: blocking queue readers, and not
    vLLM's optional spin-loop extension, which would spin 100 ms before each blocking wait."""
    return {BLOCKING_WAIT_ENV: "1", "VLLM_USE_SPINLOOP_EXT": "0"} if engine.model == "gpu-like" else {}


def check_target(engine: EngineSettings, target: str) -> None:
    if engine.model == "gpu-like" and target != "local":
        raise LayerbenchError("engine.model gpu-like emulates a GPU's step on a CPU host and runs on the local "
                              "target only; on a GPU host or cluster, serve the real model")
