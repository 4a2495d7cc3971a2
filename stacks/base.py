"""The stack adapter contract (DESIGN.md) and the registry that picks an adapter by `kind`.

An adapter deploys one serving stack, says where to send load and where to look for metrics and logs,
reports its engine version and the engine settings really applied, and names its version-matched bare
vLLM baseline. Teardown always runs: adapters are context managers and the CLI also handles signals."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, Literal

import httpx
import psutil
from pydantic import BaseModel, ConfigDict

from harness.errors import LayerbenchError
from harness.profile import EngineSettings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = PROJECT_ROOT / ".cache"
MODEL_DIR = CACHE_DIR / "models" / "tiny-qwen2"
ENGINE_VENV = PROJECT_ROOT / ".venv-engine"


class Endpoint(BaseModel):
    base_url: str
    protocol: Literal["openai"] = "openai"  # Triton's generate_stream joins with the Triton stack
    model: str


class AppliedConfig(BaseModel):
    """What the engine says it applied: /v1/models and the startup log."""

    max_model_len: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_at_tokens: int | None = None


class DeploySettings(BaseModel):
    """Everything an adapter needs to deploy; the same object goes to a stack and to its baseline."""

    model_config = ConfigDict(extra="forbid")
    target: Literal["local", "docker", "k8s"] = "local"
    engine: EngineSettings = EngineSettings()
    model_path: Path = MODEL_DIR
    served_model_name: str = "tiny"
    url: str | None = None  # endpoint stack only
    log_dir: Path = Path("results/logs")
    startup_timeout_s: float = 600.0
    options: dict[str, str | int | float | bool] = {}  # stack-specific (replicas, batching interval...)


# Log lines vLLM prints at startup (GPU: "GPU KV cache size", CPU: "CPU KV cache size").
_KV_RE = re.compile(r"KV cache size: ([\d,]+) tokens")
_CONC_RE = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def parse_startup_log(text: str) -> AppliedConfig:
    cfg = AppliedConfig()
    if kv := _KV_RE.findall(text):
        cfg.kv_cache_tokens = int(kv[-1].replace(",", ""))
    if conc := _CONC_RE.findall(text):
        tokens, x = conc[-1]
        cfg.max_concurrency_at_tokens = int(tokens.replace(",", ""))
        cfg.max_concurrency = float(x)
    return cfg


class Stack(ABC):
    kind: ClassVar[str]
    in_request_path: ClassVar[bool] = True  # KServe RawDeployment is control-plane only
    description: ClassVar[str] = ""

    def __init__(self, settings: DeploySettings):
        unknown = set(settings.options) - self.allowed_options()
        if unknown:
            known = ", ".join(sorted(self.allowed_options())) or "none"
            raise LayerbenchError(f"unknown option(s) for stack {self.kind}: {', '.join(sorted(unknown))}; "
                                  f"known: {known}")
        self.settings = settings

    @classmethod
    def allowed_options(cls) -> set[str]:
        """Keys this stack accepts in `--opt key=value` (and `--port`)."""
        return {"port"}

    # --- lifecycle ---
    @abstractmethod
    def deploy(self) -> None: ...

    @abstractmethod
    def wait_ready(self, timeout: float) -> float:
        """Blocks until the stack serves; returns seconds waited."""

    @abstractmethod
    def teardown(self) -> None:
        """Idempotent. Afterwards processes are gone and ports are free (raises LayerbenchError if not)."""

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    # --- where things are ---
    @abstractmethod
    def endpoint(self) -> Endpoint: ...

    def metric_endpoints(self) -> dict[str, str]:
        return {"api": f"{self.endpoint().base_url}/metrics"}

    def log_locations(self) -> dict[str, Path]:
        return {}

    # --- what runs ---
    @abstractmethod
    def engine_version(self) -> str: ...

    def baseline(self) -> Stack | None:
        """The bare vLLM of exactly this engine version, same environment, same settings."""
        return None

    def verify_config(self) -> AppliedConfig:
        cfg = AppliedConfig()
        ep = self.endpoint()
        try:
            card = httpx.get(f"{ep.base_url}/v1/models", timeout=10).json()["data"][0]
            cfg.max_model_len = card.get("max_model_len")
            # Ray Serve LLM: {"rayllm_metadata" | "metadata": {"max_request_context_length": ...}}
            for key, value in card.items():
                if cfg.max_model_len is None and "metadata" in key and isinstance(value, dict):
                    cfg.max_model_len = value.get("max_request_context_length")
        except (httpx.HTTPError, ValueError, KeyError, IndexError, AttributeError):
            pass
        for path in self.log_locations().values():
            if path.exists():
                found = parse_startup_log(path.read_text(errors="replace"))
                cfg.kv_cache_tokens = cfg.kv_cache_tokens or found.kv_cache_tokens
                cfg.max_concurrency = cfg.max_concurrency or found.max_concurrency
                cfg.max_concurrency_at_tokens = cfg.max_concurrency_at_tokens or found.max_concurrency_at_tokens
        return cfg

    def processes(self) -> dict[str, list[psutil.Process]]:
        """Processes of this deployment by role label, for 'where the CPU went'."""
        return {}

    def dead(self) -> str | None:
        """Why the deployment is no longer serving (checked after every level), or None while it runs."""
        return None

    def process_cpu(self) -> dict[int, tuple[str, float]]:
        """pid -> (label, cumulative CPU seconds). Keyed by pid because labels can change while a process
        runs (Ray retitles an actor with the method it is in); the runner aggregates deltas by label."""
        out: dict[int, tuple[str, float]] = {}
        for role, procs in self.processes().items():
            for p in procs:
                try:
                    with p.oneshot():
                        t = p.cpu_times()
                        out[p.pid] = (f"{role}:{_proc_label(p)}", t.user + t.system)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
        return out

    def describe(self) -> dict:
        return {"stack": self.kind, "in_request_path": self.in_request_path, "target": self.settings.target,
                "options": self.settings.options}


def _proc_label(p: psutil.Process) -> str:
    """A stable, pid-free name: vLLM's setproctitle names (VLLM::EngineCore, VLLM::Worker), Ray's actor names
    without the method they are in (ray::ServeController.listen_for_change -> ray::ServeController)."""
    try:
        cmd = p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        cmd = []
    joined = " ".join(cmd)
    if "resource_tracker" in joined:
        return "resource_tracker"
    if joined.startswith("ray::"):
        return joined.split()[0].split(".")[0]
    name = cmd[0] if cmd else p.name()
    if "-c" in cmd[1:2]:
        return "python -c"
    if name.endswith("python") or "python3" in name:
        # a plain interpreter: name it by its module or script
        rest = [c for c in cmd[1:] if not c.startswith("-")]
        name = rest[0] if rest else name
    return Path(name).name[:60]


REGISTRY: dict[str, type[Stack]] = {}


def register(cls: type[Stack]) -> type[Stack]:
    REGISTRY[cls.kind] = cls
    return cls


def get_stack(kind: str) -> type[Stack]:
    import stacks  # noqa: F401  (importing the package registers every adapter)

    try:
        return REGISTRY[kind]
    except KeyError:
        raise LayerbenchError(f"unknown stack {kind!r}: known stacks are {', '.join(sorted(REGISTRY))}") from None
