"""The engine environment, shared by every adapter that runs vLLM and by the k8s and docker renderers: its
interpreter, the environment and flags a vLLM process gets on this host (the same for a stack and its
baseline), the settings a plan compares, and the installed version."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.errors import LayerbenchError
from harness.gpus import device_env
from stacks.base import CACHE_DIR, ENGINE_VENV, DeploySettings
from stacks.engine_model import engine_model_env


def engine_python(venv: Path = ENGINE_VENV) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        raise LayerbenchError(f"the engine environment {venv} is missing: run `make setup` (installs vLLM)")
    return py


def engine_env(settings: DeploySettings) -> dict[str, str]:
    """Environment for a vLLM process on this host. The model was resolved before the deployment, so the engine
    reads the HF cache offline: both sides load the very files that were resolved. The GPUs it may use are
    named as nvidia-smi numbers them (harness.gpus.device_env)."""
    model = settings.model
    return {
        "HF_HUB_OFFLINE": "1",
        **({"HF_HUB_CACHE": str(model.hf_cache)} if model is not None and model.hf_cache else {}),
        "VLLM_CPU_KVCACHE_SPACE": str(max(1, round(settings.engine.kv_cache_gib))),
        "VLLM_CACHE_ROOT": str(CACHE_DIR / "vllm"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONUNBUFFERED": "1",
        **device_env(settings.devices),
        **engine_model_env(settings.engine),
    }


def model_ref(settings: DeploySettings) -> tuple[str, str | None]:
    """(--model, --revision) for the engine: a hub model by repo id and resolved commit, else its directory."""
    return settings.model.engine_ref() if settings.model is not None else (str(settings.model_path), None)


def model_args(settings: DeploySettings) -> list[str]:
    model, revision = model_ref(settings)
    return ["--model", model, *(["--revision", revision] if revision else [])]


def model_kwargs(settings: DeploySettings) -> dict:
    """model_args as AsyncEngineArgs keywords, for a layer that runs the engine in its own process."""
    model, revision = model_ref(settings)
    return {"model": model, **({"revision": revision} if revision else {})}


def engine_args(settings: DeploySettings) -> list[str]:
    """vLLM engine flags shared by every stack that wraps vLLM, so stack and baseline apply the same ones."""
    e = settings.engine
    args = ["--max-model-len", str(e.max_model_len), "--max-num-seqs", str(e.max_num_seqs), "--dtype", e.dtype,
            "--tensor-parallel-size", str(e.tensor_parallel_size)]
    if e.enforce_eager:
        args.append("--enforce-eager")
    if not e.enable_prefix_caching:
        args.append("--no-enable-prefix-caching")
    if e.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", e.kv_cache_dtype]
    if settings.devices:  # vLLM's CPU build sizes its KV cache by VLLM_CPU_KVCACHE_SPACE instead
        args += ["--gpu-memory-utilization", str(e.gpu_memory_utilization)]
    return args + list(e.extra_args)


def engine_kwargs(settings: DeploySettings, layer: str) -> dict:
    """The engine flags of `engine_args` as vLLM's AsyncEngineArgs keywords, for a layer that runs the engine
    itself (Ray Serve LLM's engine_kwargs, Triton's and KServe's in-process models). `extra_args` are CLI
    flags with no keyword form: refused, naming the layer."""
    e = settings.engine
    if e.extra_args:
        raise LayerbenchError(f"engine.extra_args are vLLM CLI flags and cannot be forwarded to {layer}; set the "
                              "equivalent profile fields instead")
    kw = {"max_model_len": e.max_model_len, "max_num_seqs": e.max_num_seqs, "dtype": e.dtype,
          "tensor_parallel_size": e.tensor_parallel_size, "enforce_eager": e.enforce_eager,
          "enable_prefix_caching": e.enable_prefix_caching}
    if e.kv_cache_dtype != "auto":
        kw["kv_cache_dtype"] = e.kv_cache_dtype
    if settings.devices:
        kw["gpu_memory_utilization"] = e.gpu_memory_utilization
    return kw


# The engine settings a plan compares between the sides, with vLLM's defaults for flags left out (a dry run's
# plan.json; tests hold every stack's deployment to its baseline's).
PLAN_DEFAULTS = {"revision": None, "enforce_eager": False, "enable_prefix_caching": True, "kv_cache_dtype": "auto",
                 "gpu_memory_utilization": None, "tensor_parallel_size": 1}
_FLAG_TYPES = {"max_model_len": int, "max_num_seqs": int, "tensor_parallel_size": int, "gpu_memory_utilization": float}


def settings_from_args(args: list[str]) -> dict:
    """vLLM's command-line flags (`--key value` or `--key=value`) as the keyword settings a plan compares."""
    out: dict = dict(PLAN_DEFAULTS)
    i = 0
    while i < len(args):
        flag, _, inline = args[i].partition("=")
        key = flag.removeprefix("--").replace("-", "_")
        if key == "enforce_eager":
            out[key] = True
        elif key == "no_enable_prefix_caching":
            out["enable_prefix_caching"] = False
        elif key in ("model", "revision", "dtype", "kv_cache_dtype", *_FLAG_TYPES):
            value = inline if inline else args[i + 1] if i + 1 < len(args) else ""
            out[key] = _FLAG_TYPES.get(key, str)(value)
            i += 0 if inline else 1
        i += 1
    return out


def settings_from_kwargs(kwargs: dict) -> dict:
    """AsyncEngineArgs keywords as the settings a plan compares."""
    keys = ("model", "max_model_len", "max_num_seqs", "dtype", *PLAN_DEFAULTS)
    return {**PLAN_DEFAULTS, **{k: v for k, v in kwargs.items() if k in keys}}


def check_model_files(settings: DeploySettings) -> None:
    if not settings.model_path.exists():
        raise LayerbenchError(f"model not found at {settings.model_path}: run `make setup`")


def installed_vllm_version(venv: Path = ENGINE_VENV) -> str:
    py = engine_python(venv)
    out = subprocess.run([str(py), "-c", "import importlib.metadata as m\n"
                          "for d in ('vllm', 'vllm-cpu'):\n"
                          "    try: print(m.version(d)); break\n"
                          "    except m.PackageNotFoundError: pass"],
                         capture_output=True, text=True, timeout=60)
    version = out.stdout.strip()
    if out.returncode != 0 or not version:
        raise LayerbenchError(f"vLLM is not installed in {venv}: run `make setup`")
    return version.split("+")[0]
