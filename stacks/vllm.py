"""Bare vLLM, local target: `python -m vllm.entrypoints.openai.api_server` from the engine environment on
127.0.0.1 and a free port, in its own process group, log to a file. It is every layer's baseline."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
from rich.console import Console

from harness.errors import LayerbenchError
from harness.gpus import device_env
from stacks.base import CACHE_DIR, ENGINE_VENV, DeploySettings, Stack, register
from stacks.engine_model import engine_model_env
from stacks.local import LocalServerStack
from stacks.procs import wait_http_ready


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


@register
class VllmStack(LocalServerStack):
    kind = "vllm"
    in_request_path = False
    description = "bare vLLM OpenAI server (the baseline)"
    server_name = "vLLM"

    def __init__(self, settings: DeploySettings, port: int | None = None, venv: Path = ENGINE_VENV):
        """venv: the environment vLLM runs from (a layer's baseline runs from the layer's own)."""
        super().__init__(settings, port)
        self.venv = venv
        self._version: str | None = None

    def deploy(self) -> None:
        check_model_files(self.settings)
        self.check_ports()
        self.start([str(engine_python(self.venv)), *self.server_args()], engine_env(self.settings))

    def server_args(self) -> list[str]:
        """The server's command line after the interpreter."""
        return ["-m", "vllm.entrypoints.openai.api_server", *model_args(self.settings), "--served-model-name",
                self.settings.served_model_name, "--host", "127.0.0.1", "--port", str(self.port),
                *engine_args(self.settings)]

    def wait_ready(self, timeout: float, console: Console | None = None) -> float:
        assert self.proc is not None, "deploy() first"
        waited = wait_http_ready(f"{self.endpoint().base_url}/health", timeout, "vLLM", self.proc.alive,
                                 self.log_path, console)
        self.proc.tree()  # remember every child for teardown's survivor check
        return waited

    def log_locations(self) -> dict[str, Path]:
        return {"engine": self.log_path}

    def engine_plan(self) -> dict:
        return {**settings_from_args(self.server_args()), "devices": list(self.settings.devices)}

    def engine_version(self) -> str:
        if self._version is None:
            try:  # the running server is the most direct answer
                self._version = httpx.get(f"{self.endpoint().base_url}/version", timeout=5).json()["version"]
            except (httpx.HTTPError, ValueError, KeyError):
                self._version = installed_vllm_version(self.venv)
        return self._version

    def describe(self) -> dict:
        return {**super().describe(), "venv": str(self.venv)}

    def baseline(self) -> Stack:
        """A second bare vLLM deployment of the same version and settings: `compare --stack vllm` is the A/A
        run that measures the method's own noise on this host. A fixed --port stays with this deployment."""
        return VllmStack(self.settings.model_copy(update={"options": {}}), venv=self.venv)
