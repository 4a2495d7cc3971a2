"""What `engine.model` may name, and the layer study's model: standard library only, shared by the profile's
validation, the model's resolution (stacks/base/engine_model.py) and `make doctor`, which runs before any
environment exists."""

from __future__ import annotations

import re

MODEL_KEYWORDS = ("auto", "tiny", "gpu-like")
# The layer study's model, at the commit of its repository's main branch that this project pins, so every GPU
# host that runs `auto` serves the same weights (override with engine.model / engine.revision).
STUDY_MODEL = ("Qwen/Qwen2.5-1.5B-Instruct", "989aa7980e4cf806f80c7fef2b1adb7bc71aa306")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_LOCAL_PATH = re.compile(r"^(/|\./|\.\./|~)")


def model_kind(model: str) -> str:
    """"auto", "tiny", "gpu-like", "hub" (a Hugging Face repo id) or "path" (a local directory); ValueError for
    anything else."""
    if model in MODEL_KEYWORDS:
        return model
    if _LOCAL_PATH.match(model):
        return "path"
    if _REPO_ID.match(model) and ".." not in model:
        return "hub"
    raise ValueError(f"engine.model {model!r} is none of: auto, tiny, gpu-like, a Hugging Face repo id "
                     "(org/name), a local directory (starting with /, ./, ../ or ~)")
