"""The stack adapter contract (docs/design.md, docs/adding-a-stack.md) and the registry that picks an adapter by `kind`.

An adapter deploys one serving stack, says where to send load and where to look for metrics and logs,
reports its engine version and the engine settings really applied, and names its version-matched bare
vLLM baseline. Teardown always runs: adapters are context managers and the CLI also handles signals."""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args, get_origin

import httpx
import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from harness.errors import LayerbenchError
from harness.profile.schema import EngineSettings
from harness.schemas import AppliedConfig, LayerMetric, PublishedResult, ServedModel
from harness.schemas.baselines import published_for

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = PROJECT_ROOT / ".cache"
MODEL_DIR = CACHE_DIR / "models" / "tiny-qwen2"
ENGINE_VENV = PROJECT_ROOT / ".venv-engine"


class Endpoint(BaseModel):
    base_url: str
    protocol: Literal["openai", "triton"] = "openai"  # picks the streaming client (harness/load/protocols.py)
    model: str
    # N engines with no layer between (stacks.base.replicas): the load client picks one per request, each in turn
    # or by a hash of the prompt's first characters; [] for one endpoint
    spread: list[str] = []
    spread_by: Literal["round_robin", "hash"] = "round_robin"


class DeploySettings(BaseModel):
    """Everything an adapter needs to deploy; the same object goes to a stack and to its baseline."""

    model_config = ConfigDict(extra="forbid")
    target: Literal["local", "docker", "k8s"] = "local"
    engine: EngineSettings = EngineSettings()
    model_path: Path = MODEL_DIR  # the model's files on this host (tokenizer, config.json): ServedModel.path
    served_model_name: str = "tiny"
    model: ServedModel | None = None  # None: the tiny model at model_path, served by its directory
    devices: list[int] = []  # GPU indices (nvidia-smi's) the deployment may use; [] on a host without GPUs
    url: str | None = None  # endpoint stack only
    log_dir: Path = Path("results/logs")
    startup_timeout_s: float = 600.0
    options: dict[str, str | int | float | bool] = {}  # stack-specific (replicas, batching interval...)


class NoOptions(BaseModel):
    """A stack's `--opt key=value` settings, typed and bounded, so a bad value is refused before anything is
    deployed instead of failing an hour into a compare. Unknown keys are refused too."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _as_typed(cls, value: Any, info: ValidationInfo) -> Any:
        # `--opt` values arrive typed by guess (parse_options): `true` must not pass as the number 1,
        # and a number given to a text field is the text the user typed
        annotation = cls.model_fields[info.field_name].annotation if info.field_name else None
        if isinstance(value, bool) and annotation is not bool:
            raise ValueError("a boolean is not valid here")
        if isinstance(value, int | float) and _is_text(annotation):
            return str(value)
        return value


def _is_text(annotation: Any) -> bool:
    """str, or a Literal of strings (`metrics_fault=500` is the string '500')."""
    if get_origin(annotation) is Literal:
        return all(isinstance(a, str) for a in get_args(annotation))
    return annotation is str


class StackOptions(NoOptions):
    """Options every locally deployed stack accepts."""

    port: int | None = Field(None, ge=1, le=65535, description="the API port (default: a free one)")


def parse_options(pairs: list[str] | None) -> dict[str, str | int | float | bool]:
    """--opt key=value (repeatable) -> stack options; numbers and booleans are typed."""
    out: dict[str, str | int | float | bool] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise LayerbenchError(f"--opt takes key=value, got {pair!r}")
        value: str | int | float | bool = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    value = cast(raw)
                    break
                except ValueError:
                    continue
        out[key.replace("-", "_")] = value
    return out


def validate_options(kind: str, model: type[BaseModel], options: dict[str, Any]) -> BaseModel:
    """`options` checked against a stack's model; LayerbenchError naming the stack, each bad option and why."""
    try:
        return model.model_validate(options)
    except ValidationError as e:
        problems = []
        for err in e.errors():  # unknown keys were refused before (Stack.__init__), with the known ones
            name = ".".join(str(p) for p in err["loc"]) or "?"
            problems.append(f"option {name}: {err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})")
        raise LayerbenchError(f"stack {kind}: " + "; ".join(problems)) from None


# Log lines vLLM prints at startup (GPU: "GPU KV cache size", CPU: "CPU KV cache size"), and its engine config
# ("Initializing a V1 LLM engine (v0.32.0) with config: model='...', ..., revision=..., tensor_parallel_size=1").
_KV_RE = re.compile(r"KV cache size: ([\d,]+) tokens")
_CONC_RE = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_ENGINE_RE = re.compile(r"with config: model='([^']*)'.*?, revision=([^,]*),.*?tensor_parallel_size=(\d+)")


def parse_startup_log(text: str) -> AppliedConfig:
    cfg = AppliedConfig()
    if kv := _KV_RE.findall(text):
        cfg.kv_cache_tokens = int(kv[-1].replace(",", ""))
    if conc := _CONC_RE.findall(text):
        tokens, x = conc[-1]
        cfg.max_concurrency_at_tokens = int(tokens.replace(",", ""))
        cfg.max_concurrency = float(x)
    if engine := _ENGINE_RE.findall(text):
        model, revision, tp = engine[-1]
        cfg.model, cfg.tensor_parallel_size = model, int(tp)
        cfg.revision = None if revision in ("None", "") else revision
    return cfg


class Stack(ABC):
    kind: ClassVar[str]
    in_request_path: ClassVar[bool] = True  # KServe RawDeployment is control-plane only
    # dead() only looks at local processes: cheap enough to ask every quarter second while a level runs
    cheap_liveness: ClassVar[bool] = True
    # the engine loads settings.model_path, so the model's config.json sizes its KV cache (not so for the
    # reference engine, or a server layerbench did not start)
    loads_model: ClassVar[bool] = True
    exposure_hint: ClassVar[str] = ""  # how to close ports the deployment opens beyond loopback, if it can
    description: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = StackOptions  # what `--opt key=value` (and `--port`) may set
    engine_venv: Path = ENGINE_VENV  # the environment this stack's vLLM runs from; its baseline runs from it too
    # the docker and k8s targets' forms of this stack as "module:function", resolved only when a target renders
    # (target_form), so an adapter never imports the cluster code; None: the stack runs on the local target only
    docker_form: ClassVar[str | None] = None
    k8s_form: ClassVar[str | None] = None
    k8s_crds: ClassVar[tuple[tuple[str, str, str], ...]] = ()  # (group, kind, version) its k8s form applies
    # engine settings the layer's published image sets in its environment (docker and k8s targets): the bare
    # baseline's container gets them too, so the two sides' engines differ by the layer only
    image_engine_env: ClassVar[dict[str, str]] = {}
    # engine.replicas above 1: "client", a bare engine the load client spreads over (stacks.base.replicas);
    # "layer", a layer that fronts every engine itself; "": a stack that cannot (refused before deploying)
    replicas_by: ClassVar[Literal["client", "layer", ""]] = ""

    def __init__(self, settings: DeploySettings):
        """Checks the options before anything is deployed (LayerbenchError naming the option)."""
        self.options: Any = self.checked_options(settings.options)
        self.settings = settings

    @classmethod
    def checked_options(cls, options: dict[str, Any]) -> BaseModel:
        """`--opt` options typed by the stack's model; LayerbenchError naming each unknown or bad one."""
        unknown = set(options) - cls.allowed_options()
        if unknown:
            known = ", ".join(sorted(cls.allowed_options())) or "none"
            raise LayerbenchError(f"unknown option(s) for stack {cls.kind}: {', '.join(sorted(unknown))}; "
                                  f"known: {known}")
        return validate_options(cls.kind, cls.Options, dict(options))

    @classmethod
    def engine_flags(cls, options: BaseModel) -> tuple[str, ...]:
        """vLLM API-server flags this stack's engines need under these options (vllm-router's cache_aware: the
        render endpoints it tokenizes with). build_stack adds them to engine.extra_args, so the bare side's engines
        get them too and both sides run one engine."""
        return ()

    @classmethod
    def allowed_options(cls) -> set[str]:
        """Keys this stack accepts in `--opt key=value` (and `--port`)."""
        return set(cls.Options.model_fields)

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
        from harness.signals import shielded

        with shielded(f"teardown of {self.kind}"):
            self.teardown()

    # --- where things are ---
    @abstractmethod
    def endpoint(self) -> Endpoint: ...

    def metric_aliases(self) -> tuple[str, ...]:
        """Prefixes this stack puts in place of `vllm:` when it re-exports the engine's metrics (Ray Serve:
        `ray_vllm_`); the audit and the per-level summaries read the engine's families under these names."""
        return ()

    def metric_endpoints(self) -> dict[str, str]:
        return {"api": f"{self.endpoint().base_url}/metrics"}

    def metricless_endpoints(self) -> dict[str, str]:
        """Where a user would look for metrics that the stack declares serves none (Ray Serve's and Triton's API
        ports): the audit lists them as such, and nothing scrapes them (a scrape would only count 404s)."""
        return {}

    def layer_headers(self) -> dict[str, str]:
        """Response headers in which the layer times its own part of each request: name (lower-case) -> what it
        is. The client keeps them per request; each level's report splits the time outside the engine with them."""
        return {}

    def private_network(self) -> str | None:
        """Why this deployment must run in a private network namespace (it binds beyond loopback and offers no
        setting against it), or None: the command then runs again inside one (harness.host.netns)."""
        return None

    def tuning(self) -> dict[str, str]:
        """The option sweep to try when a diagnosis rule fires (harness.analysis.diagnose.RULES -> `OPT=` of
        `make sweep`): only options this stack declares."""
        return {}

    def layer_metrics(self) -> tuple[LayerMetric, ...]:
        """The layer's own figures to summarise per level from its metric endpoints (Triton: queue time)."""
        return ()

    def shape(self) -> str | None:
        """Which form of the stack this deployment is, where it has several (KServe's modes); the report's
        first line names it."""
        return None

    def published(self) -> PublishedResult | None:
        """What a published study measured for this deployment's shape, where one exists: the reference in
        baselines/published/*.yaml for this stack whose `shape` this deployment has (published_shape())."""
        return published_for(self.kind, self.published_shape())

    def published_shape(self) -> dict[str, Any]:
        """The facts of this deployment a published reference's `shape` is matched against: its options, typed
        (Ray's ingress_replicas, KServe's mode), and whatever else a study's shape depends on."""
        return self.options.model_dump()

    def observability_note(self) -> str | None:
        """One sentence on a setting that decides what the engine's metrics look like behind this stack."""
        return None

    def audit_shapes(self) -> list[tuple[str, Stack]]:
        """Other shapes of this deployment the audit deploys after it, as (label, stack): Triton audits its
        engine metrics switched on as well as off unless the user chose."""
        return []

    def log_locations(self) -> dict[str, Path]:
        return {}

    # --- what runs ---
    @abstractmethod
    def engine_version(self) -> str: ...

    def engine_plan(self) -> dict | None:
        """The engine settings this deployment would apply, in vLLM's keyword names, with the GPUs it may use:
        built from the very command line or engine arguments deploy() uses, so a dry run's plan and the tests can
        hold both sides of a compare to the same. None: no engine of layerbench's (an endpoint, the sims)."""
        return None

    def again(self, log_dir: Path) -> Stack:
        """A fresh deployment of this stack with the same settings (its own ports), logging under log_dir: a
        compare's later deployment pairs."""
        return type(self)(self.settings.model_copy(update={"log_dir": log_dir}))

    def baseline(self) -> Stack | None:
        """The bare vLLM of exactly this engine version: vLLM's own server from this stack's engine environment
        (`engine_venv`), with the same settings and none of the stack's options; `engine.replicas` of them, the
        load client spreading requests over them, where the stack fronts several engines."""
        settings = self.settings.model_copy(update={"options": {}})

        def bare(s: DeploySettings) -> Stack:
            return REGISTRY["vllm"](s, venv=self.engine_venv)

        if settings.engine.replicas > 1:
            from stacks.base.replicas import ReplicaSet

            return ReplicaSet(settings, bare)
        return bare(settings)

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
                for field in ("tensor_parallel_size", "model", "revision"):
                    if getattr(cfg, field) is None:
                        setattr(cfg, field, getattr(found, field))
        return cfg

    def processes(self) -> dict[str, list[psutil.Process]]:
        """Processes of this deployment by role label, for 'where the CPU went'."""
        return {}

    def dead(self) -> str | None:
        """Why the deployment is no longer serving, or None while it runs: checked after every level, and
        while a level runs when `cheap_liveness`."""
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


def target_form(kind: str, target: str) -> Callable[..., Any]:
    """The function that renders stack `kind` for `target` (docker or k8s), as its adapter names it."""
    cls = get_stack(kind)
    ref = cls.docker_form if target == "docker" else cls.k8s_form
    if ref is None:
        forms = sorted(k for k, c in REGISTRY.items() if (c.docker_form if target == "docker" else c.k8s_form))
        raise LayerbenchError(f"stack {kind} has no {target} form: the {target} target deploys {', '.join(forms)} "
                              "(use --target local)")
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def get_stack(kind: str) -> type[Stack]:
    # importing the package registers every adapter; by name, as the package finds its adapters (stacks/__init__.py)
    importlib.import_module("stacks")

    try:
        return REGISTRY[kind]
    except KeyError:
        raise LayerbenchError(f"unknown stack {kind!r}: known stacks are {', '.join(sorted(REGISTRY))}") from None
